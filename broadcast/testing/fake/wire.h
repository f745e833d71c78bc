// The fake backend's medium: an in-process registry of listening addresses,
// a model of each link (latency, bandwidth, whether it is up) and of each
// port (an address: a NIC's rate, shared by everything that sends from or to
// it, and whether it is up). Bytes move by memcpy, through the same
// SliceSink calls and checksum checks as on a real network, so the sprayer,
// rail health and the whole engine run unchanged under unit tests with no NIC.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "broadcast/transport/transport.h"

namespace deltacast::fake {

struct LinkModel {
  std::chrono::microseconds latency{50};
  double bytes_per_second = 0;  // 0: as fast as memcpy
  bool up = true;               // a down link stalls silently, like a cable pulled out
};

// A NIC, by address, full duplex: slices sent from it take turns at its rate (first come, first
// served), and so do slices sent to it, so a receiver fed by several senders, or a sender
// feeding several receivers, shares its port the way a switched network's port is shared. A
// slice holds each port only for its own time at that port's rate (the switch buffers in
// between): a slow receiver does not hold up its sender's other links.
struct PortModel {
  double bytes_per_second = 0;  // 0: no limit
  bool up = true;               // a down port stalls everything through it silently
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

  // Port models by host address; unknown ports have no limit.
  void set_port(const std::string& host, PortModel model);
  // Cuts (or mends) the path between two host addresses, both ways: a WAN link between sites that
  // fails while each side's own network keeps working.
  void set_path_up(const std::string& host_a, const std::string& host_b, bool up);
  // Whether a slice can cross `rail` now (its link, both ports and the path between them are up).
  bool passable(const RailSpec& rail) const;
  // Since when `rail` has not been passable (its link, a port or the path down the longest), if
  // it is not: its receiver's heartbeats stopped crossing then (FakeChannel::receiver_silent_for).
  std::optional<std::chrono::steady_clock::time_point> impassable_since(const RailSpec& rail) const;
  // Reserves both ports of `rail` for `bytes` from `now` on (after what they carry already) and
  // returns when the last byte arrives, latency included.
  std::chrono::steady_clock::time_point transmit(const RailSpec& rail, uint32_t bytes,
                                                 std::chrono::steady_clock::time_point now);
  // The bytes transmitted so far from one host address to another (what a link between them
  // would count: tests of what crosses between sites).
  uint64_t carried(const std::string& from_host, const std::string& to_host) const;

 private:
  using TimePoint = std::chrono::steady_clock::time_point;
  struct Port {
    PortModel model;
    TimePoint down_since{};  // while the model is down
    std::chrono::steady_clock::time_point out_free{};  // when it finishes sending what it has
    std::chrono::steady_clock::time_point in_free{};   // ... and receiving
  };

  mutable std::mutex mu_;
  std::map<std::string, SliceSink*> listeners_;
  std::map<std::string, LinkModel> links_;
  std::map<std::string, TimePoint> link_down_since_;  // while a link's model is down
  std::map<std::string, Port> ports_;
  std::map<std::pair<std::string, std::string>, uint64_t> carried_;
  std::map<std::pair<std::string, std::string>, TimePoint> cut_;  // both orders of each cut pair, since when
};

// Lands one slice in `sink` the way every receiving backend must: begin(),
// copy, checksum check, complete(). Returns whether the sink accepted it.
Result<bool> deliver(SliceSink& sink, const SliceRef& slice, const uint8_t* payload);

}  // namespace deltacast::fake
