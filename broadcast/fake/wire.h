// The fake backend's medium: an in-process registry of listening addresses
// and a model of each link (latency, bandwidth, whether it is up). Bytes move
// by memcpy, through the same SliceSink calls and checksum checks as on a
// real network, so the sprayer and rail-health logic run unchanged under
// unit tests with no NIC.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "broadcast/transport.h"

namespace deltacast::fake {

struct LinkModel {
  std::chrono::microseconds latency{50};
  double bytes_per_second = 0;  // 0: as fast as memcpy
  bool up = true;               // a down link stalls silently, like a cable pulled out
};

class FakeNetwork {
 public:
  // Listening address -> the sink behind it.
  void bind(const std::string& address, SliceSink* sink);
  void unbind(const std::string& address);
  SliceSink* lookup(const std::string& address) const;

  // Link models by rail name (the RailSpec's name); unknown rails get the default.
  void set_link(const std::string& rail, LinkModel model);
  LinkModel link(const std::string& rail) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, SliceSink*> listeners_;
  std::map<std::string, LinkModel> links_;
};

// Lands one slice in `sink` the way every receiving backend must: begin(),
// copy, checksum check, complete(). Returns whether the sink accepted it.
Result<bool> deliver(SliceSink& sink, const SliceRef& slice, const uint8_t* payload);

}  // namespace deltacast::fake
