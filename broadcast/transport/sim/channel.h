// The simulated backend's sender end of a rail: each slice is placed on the
// model's ports (wire.h) when it is sent, lands in the receiver's sink at its
// arrival time, and is acknowledged one latency later, all as events of the
// network's loop. No bytes move: the receiving sink is told every slice
// arrived verified (a simulation has nothing to corrupt). A slice that meets a
// port that is down never arrives, and its copy stays outstanding until the
// sprayer's deadline gives up on it and resets the channel, which fails
// everything still outstanding at once.
#pragma once

#include <cstdint>
#include <deque>

#include "broadcast/transport/sim/wire.h"

namespace deltacast::sim {

class SimChannel : public Channel, private PortSender {
 public:
  SimChannel(SimNetwork* network, RailSpec rail);
  ~SimChannel() override;

  void send(const SliceRef& slice, const uint8_t* data, SliceDone done) override;
  bool ready() const override;
  void reset() override;
  void close() override;
  const RailSpec& rail() const override { return rail_; }

 private:
  void started(uint64_t id, TimePoint start, TimePoint left) override;
  void arrive(uint64_t id);
  void fail_outstanding(const char* why);

  SimNetwork* network_;
  RailSpec rail_;
  uint32_t from_ = 0;
  uint32_t to_ = 0;
  uint32_t flow_ = 0;  // its turn at the sender's port
  SliceSink* const* receiver_;  // the network's slot for rail_.remote
  bool closed_ = false;
  uint64_t next_id_ = 1;
  struct Outstanding {
    SliceRef slice;
    SliceDone done;
    bool settled = false;  // acknowledged or failed
  };
  // Sent, not yet acknowledged or failed, by id from first_id_: ids are handed out in order and
  // mostly settled in order, so a window (settled ones dropped from its front) finds them with
  // no tree to walk or rebalance.
  Outstanding* find(uint64_t id);
  void settle(uint64_t id);
  std::deque<Outstanding> outstanding_;
  uint64_t first_id_ = 1;
  // Events hold this, not the channel: a channel closed (or gone) before its events run is
  // told so by the flag and they do nothing.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace deltacast::sim
