// A Channel decorator that injects faults, so that failover, deadlines,
// duplicate suppression and rail health are exercised under unit tests with
// the fake backend (and can be layered over a real backend too).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "broadcast/transport/transport.h"

namespace deltacast {

struct FaultPlan {
  enum Mode {
    kNone,     // pass everything through
    kRefuse,   // fail each send at once (connection refused)
    kDelay,    // hold each send for `delay`, then pass it on
    kDrop,     // swallow: no delivery, no completion until reset or close
    kCorrupt,  // flip a byte of the payload on the way (the receiver's checksum catches it)
    kStall,    // hold every send until release(), reset or close
  };
  Mode mode = kNone;
  std::chrono::milliseconds delay{0};
  uint64_t after = 0;  // the first `after` sends pass untouched (kRefuse + after = N: fail after N)
};

class FaultyChannel : public Channel {
 public:
  explicit FaultyChannel(std::unique_ptr<Channel> inner, FaultPlan plan = {});
  ~FaultyChannel() override;

  void set_plan(FaultPlan plan);
  // Passes on everything a kStall plan is holding.
  void release();
  uint64_t sends() const;

  void send(const SliceRef& slice, const uint8_t* data, SliceDone done) override;
  bool ready() const override { return inner_->ready(); }
  void reset() override;
  void close() override;
  const RailSpec& rail() const override { return inner_->rail(); }
  std::optional<trust::Protection> protection() const override { return inner_->protection(); }
  uint32_t initial_window() const override { return inner_->initial_window(); }
  // The inner channel's, while its faults leave the path working (none, delays, corruption); with
  // sends refused, dropped or stalled, unknown (the fault says nothing of heartbeats).
  std::optional<Millis> receiver_silent_for() const override;

 private:
  struct Held {
    SliceRef slice;
    const uint8_t* data;
    SliceDone done;
  };
  void forward(Held held);
  void fail_held(std::unique_lock<std::mutex>& lock);
  void run();

  std::unique_ptr<Channel> inner_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  FaultPlan plan_;
  uint64_t sends_ = 0;
  std::vector<Held> held_;                                 // dropped or stalled
  std::multimap<std::chrono::steady_clock::time_point, std::function<void()>> timers_;  // run on the worker
  bool closed_ = false;
  std::thread worker_;
};

}  // namespace deltacast
