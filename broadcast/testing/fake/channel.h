// The fake backend's sender end of a rail: a thread that plays the link,
// one slice after another (latency + bytes / bandwidth; stalled while the
// link is down), and lands each slice in the receiver's sink.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "broadcast/testing/fake/wire.h"

namespace deltacast::fake {

class FakeChannel : public Channel {
 public:
  // `dial_grace`: how long a channel made across a path already cut is not silent (as TCP dials).
  FakeChannel(FakeNetwork* network, RailSpec rail, Millis dial_grace);
  ~FakeChannel() override;

  void send(const SliceRef& slice, const uint8_t* data, SliceDone done) override;
  bool ready() const override;
  void reset() override;
  void close() override;
  const RailSpec& rail() const override { return rail_; }
  // Heartbeats, modelled: a receiver listening is heard while the rail is passable, and silent
  // since it stopped being so (FakeNetwork::impassable_since); unknown with nobody listening.
  std::optional<Millis> receiver_silent_for() const override;

 private:
  struct Item {
    SliceRef slice;
    const uint8_t* data;
    SliceDone done;
  };
  void run();

  FakeNetwork* network_;
  RailSpec rail_;
  Millis dial_grace_;
  std::chrono::steady_clock::time_point created_ = std::chrono::steady_clock::now();
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  std::deque<Item> failed_;  // completed with an error by the worker, never inside send()
  uint64_t generation_ = 0;  // bumped by reset(): the slice on the link is abandoned
  bool closed_ = false;
  std::thread worker_;
};

}  // namespace deltacast::fake
