// The simulated backend's sender end of a rail: each slice is placed on the
// model's ports (wire.h) when it is sent, lands in the receiver's sink at its
// arrival time, and is acknowledged one latency later, all as events of the
// network's loop. No bytes move: the receiving sink is told every slice
// arrived verified (a simulation has nothing to corrupt). A slice that meets a
// port that is down never arrives, and its copy stays outstanding until the
// sprayer's deadline gives up on it and resets the channel, which fails
// everything still outstanding at once. The receiver's heartbeats are modelled
// from whether the path back is open (receiver_silent_for).
#pragma once

#include <cstdint>
#include <deque>

#include "broadcast/transport/sim/wire.h"

namespace deltacast::sim {

class SimChannel : public Channel, private PortSender, private EventTarget {
 public:
  // `dial_grace`: how long a channel whose path was never open counts as still dialling
  // (transport.h's cut_path_dial_grace: its connects go unanswered).
  SimChannel(SimNetwork* network, RailSpec rail, Millis dial_grace = Millis(0));
  ~SimChannel() override;

  void send(const SliceRef& slice, const uint8_t* data, SliceDone done) override;
  bool ready() const override;
  void reset() override;
  void close() override;
  const RailSpec& rail() const override { return rail_; }
  // The receiver's heartbeats, modelled rather than sent (an event per rail and period would
  // swamp a simulation of thousands of nodes): heard while the path back to this end is open;
  // cut, silent since its last heartbeat crossed, a latency after the cut. A channel whose path
  // was cut before it was made dials as TCP's does, its connects unanswered: not silent for
  // `dial_grace`, then silent since it was made. Nothing while no receiver listens (a killed
  // one: the control link notices).
  std::optional<Millis> receiver_silent_for() const override;

 private:
  void started(uint64_t id, TimePoint start, TimePoint left) override;
  // The slice that started leaving first of those still on the way (`id`) reaches the receiver's
  // port.
  void reach(uint64_t id);
  void arrive(uint64_t id);
  void acknowledged(uint64_t id);
  // The events above, scheduled on the network's loop (what: Event, arg: the slice's id).
  enum Event : uint32_t { kReach, kArrive, kAcknowledged };
  void on_event(uint32_t what, uint64_t arg) override;
  void fail_outstanding(const char* why);

  SimNetwork* network_;
  RailSpec rail_;
  TimePoint created_;
  Millis dial_grace_;
  uint32_t from_ = 0;
  uint32_t to_ = 0;
  uint32_t flow_ = 0;  // its turn at the sender's port
  SliceSink* const* receiver_;  // the network's slot for rail_.remote
  bool closed_ = false;
  uint64_t next_id_ = 1;
  struct Outstanding {
    SliceRef slice;
    SliceDone done;
    Status status;         // the receiver's answer, on its way back
    bool settled = false;  // acknowledged or failed
  };
  // Sent, not yet acknowledged or failed, by id from first_id_: ids are handed out in order and
  // mostly settled in order, so a window (settled ones dropped from its front) finds them with
  // no tree to walk or rebalance.
  Outstanding* find(uint64_t id);
  void settle(uint64_t id);
  std::deque<Outstanding> outstanding_;
  uint64_t first_id_ = 1;
  // Slices that started leaving at a time still ahead, in that order (a flow leaves its port in
  // order), until they reach the receiver's port: the wire they take stays taken when a reset
  // fails them meanwhile, so this is kept apart from outstanding_.
  struct Leaving {
    uint64_t id;
    uint32_t bytes;
    TimePoint start, left;
  };
  std::deque<Leaving> leaving_;
  void take_wire(const Leaving& slice);
  // As the loop's target: a channel gone before its events run is removed, and they do nothing.
  uint32_t target_;
};

}  // namespace deltacast::sim
