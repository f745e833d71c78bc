// The simulated backend's medium: a clock that moves only as events run, and
// a model of the network it carries slices over. Nothing here moves bytes or
// sleeps: a slice's journey is two events (it lands in the receiver's sink;
// its acknowledgement reaches the sender), placed in simulated time by the
// model, so thousands of hosts and terabytes of traffic run in seconds on one
// core, through the same Transport interface (and so the same sprayer, rail
// health and estimators) as a real network.
//
// The model: every host address is a port (a NIC), full duplex, with its own
// rate each way; a slice holds the sender's port for its time at that port's
// rate plus a cost per slice (set_slice_cost). The port takes its senders
// (flows: one per channel) in turns of about kTurnBytes, whole slices, as a
// NIC serves its queue pairs and a kernel its sockets near enough: first come
// first served across flows let whoever posted first own the port (a
// producer's sprayer to its first chain queued its whole stripe ahead of the
// others', and 8192 simulated consumers started the chains 2 ms apart, one
// after another; turns of a single slice made a large simulation slower, each
// slice another sender's state to fetch). From the moment a slice starts leaving it
// queues for the receiver's port (first come first served there too, in the
// order slices reach it, so a sender that queued much on its own port cannot
// hold the receiver's port for slices that have not left yet); it arrives one
// latency after the later of the two is done. Ports may be grouped into a node whose PCIe/NIC limit they share, also
// each way. A port that is down drops what crosses it silently, the way a
// pulled cable stalls a connection. Ports may be placed in sites: a slice between two sites also
// crosses their WAN link (each direction a port of its own, first come first served at the link's
// rate, shared by every flow between them) and takes the link's latency instead of the network's;
// a WAN link that is down drops what crosses it.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "broadcast/transport/clock.h"
#include "broadcast/transport/transport.h"

namespace deltacast::sim {

using Duration = SteadyClock::duration;

// What an event can be addressed to instead of carrying a function: the network's ports and
// every channel. Such an event is a few numbers in the queue (no function to allocate, move and
// free, no shared flag to count: a 140 GB version to 65,536 GPUs took 0.93x the wall time), and
// it does nothing once its target is removed.
class EventTarget {
 public:
  virtual ~EventTarget() = default;
  // `what` and `arg` as scheduled (their meaning is the target's).
  virtual void on_event(uint32_t what, uint64_t arg) = 0;
};

// Simulated time and what happens in it. Time starts at the epoch and moves to each event's
// time as the event runs; an event may schedule others (never in the past).
class EventLoop : public TimeSource {
 public:
  TimePoint now() const override { return now_; }
  void at(TimePoint when, std::function<void()> event);
  void after(Duration delay, std::function<void()> event) { at(now_ + delay, std::move(event)); }
  // Targets by number; a removed one's number is never given again, so its events find nothing.
  uint32_t add_target(EventTarget* target);
  void remove_target(uint32_t target);
  // An event for a target: its on_event(what, arg) at `when`.
  void at(TimePoint when, uint32_t target, uint32_t what, uint64_t arg);
  // Runs events in time order until `done()` holds (checked after each event), none is left, or
  // the next one lies past `limit`. Returns the number of events run.
  uint64_t run(const std::function<bool()>& done, TimePoint limit = TimePoint::max());
  size_t pending() const { return queue_.size(); }

 private:
  // The heap holds small keys; the functions of the events that have one stay in a slab the keys
  // point into, so that sifting moves 32 bytes per level instead of a std::function (the heap was
  // a quarter of a large simulation's time; 1024 consumers: 3.6 -> 3.3 s).
  static constexpr uint32_t kFunction = ~0u;  // `target` of an event with a function: `arg` is its slot
  struct Key {
    TimePoint when;
    uint64_t order;  // events at one time run in the order they were scheduled
    uint32_t target;
    uint32_t what;
    uint64_t arg;
    bool operator>(const Key& o) const { return when != o.when ? when > o.when : order > o.order; }
  };
  TimePoint now_{};
  uint64_t next_order_ = 0;
  std::priority_queue<Key, std::vector<Key>, std::greater<>> queue_;
  std::vector<std::function<void()>> slab_;
  std::vector<uint32_t> free_slots_;
  std::vector<EventTarget*> targets_;  // null: removed
};

// What a port tells the sender of a slice it took (send_out): the slice starts leaving at `start`
// (ahead of now where the port's node is busy) and is done leaving at `left`.
class PortSender {
 public:
  virtual ~PortSender() = default;
  virtual void started(uint64_t token, TimePoint start, TimePoint left) = 0;
};

struct PortModel {
  double out_bytes_per_second = 0;  // 0: no limit
  double in_bytes_per_second = 0;
  bool up = true;
};

class SimNetwork : private EventTarget {
 public:
  SimNetwork() : self_(loop_.add_target(this)) {}
  SimNetwork(const SimNetwork&) = delete;  // its loop holds it by address
  SimNetwork& operator=(const SimNetwork&) = delete;

  EventLoop& loop() { return loop_; }
  const TimeSource& clock() const { return loop_; }

  // Host address -> its port. Unknown hosts have no limit and are up.
  void set_port_up(const std::string& host, bool up);
  void set_port_rates(const std::string& host, double out_bytes_per_second, double in_bytes_per_second);
  // The hosts of one node share its limit each way (0: none).
  void set_node(const std::string& host, const std::string& node);
  void set_node_limit(const std::string& node, double bytes_per_second);
  void set_latency(Duration latency) { latency_ = latency; }
  Duration latency() const { return latency_; }
  // Sites: a host's (none: the network's own), and the WAN link between two sites, both ways
  // (0 bytes/s: no limit). Sites with no link given between them are joined at no limit and the
  // network's latency.
  void set_site(const std::string& host, uint32_t site);
  void set_wan(uint32_t site_a, uint32_t site_b, double bytes_per_second, Duration latency);
  void set_wan_up(uint32_t site_a, uint32_t site_b, bool up);
  // The latency between two ports (a WAN link's between sites).
  Duration latency(uint32_t from, uint32_t to) const;
  // Whether a slice can go from one port to the other (both up, and their WAN link if any).
  bool passable(uint32_t from, uint32_t to) const;
  // Since when nothing can go from one port to the other (nothing: it can now): the earliest
  // time one of the ports or their WAN link went down of those still down.
  std::optional<TimePoint> impassable_since(uint32_t from, uint32_t to) const;
  // When a slice of `bytes` from port `from` that starts leaving at `at` is across the WAN link
  // to port `to` (`at` itself within a site). Called in time order.
  TimePoint cross(uint32_t from, uint32_t to, uint32_t bytes, TimePoint at);
  // Bytes that crossed WAN links into `site` so far.
  uint64_t wan_bytes_into(uint32_t site) const;
  // What a port spends on every slice besides its bytes (posting it, its completion, the relay's
  // turn): with it, smaller slices are not free, as on a real NIC.
  void set_slice_cost(Duration cost) { slice_cost_ = cost; }
  Duration slice_cost() const { return slice_cost_; }

  // Receivers by "host:port".
  void bind(const Endpoint& endpoint, SliceSink* sink);
  void unbind(const Endpoint& endpoint);
  SliceSink* lookup(const Endpoint& endpoint) const;
  // Where the receiver at `endpoint` is kept, whoever binds it later (null inside while none
  // is): a channel looks it up once, not per slice (formatting and hashing the address per
  // slice was a third of a large simulation's time). Stays valid as long as the network.
  SliceSink* const* sink_slot(const Endpoint& endpoint);
  uint16_t free_port(const std::string& host);

  // A port's index, for what is looked up per slice.
  uint32_t port_of(const std::string& host);
  bool up(uint32_t port) const { return ports_[port].model.up; }
  // When a slice of `bytes` handed to port `from` now starts and ends leaving it (after what
  // the port and its node send already).
  std::pair<TimePoint, TimePoint> leave(uint32_t from, uint32_t bytes);
  // When a slice of `bytes` reaching port `to` at `at` is all in (after what the port and its
  // node take in already). Called at `at`, in time order.
  TimePoint enter(uint32_t to, uint32_t bytes, TimePoint at);
  // A sender's flow (one per channel): its slices leave their port in turns with the other
  // flows'. The sender is told of each as it starts leaving until forget_flow (the network
  // outlives its channels: the transport takes it by pointer).
  uint32_t new_flow(PortSender* sender);
  void forget_flow(uint32_t flow);
  // A slice (`token`) of `flow` handed to port `from` now; it leaves in the flow's turn.
  void send_out(uint32_t from, uint32_t flow, uint32_t bytes, uint64_t token);
  // Both for a slice sent now, reserving the receiver's port at once (what a caller without
  // events in between, such as a test, can use): when its last byte arrives.
  TimePoint transmit(uint32_t from, uint32_t to, uint32_t bytes);

 private:
  struct Share {  // one direction of a port or of a node
    TimePoint free{};
  };
  struct Pending {
    uint32_t bytes;
    uint32_t flow;
    uint64_t token;
  };
  // One flow's slices waiting for its port, in order (a vector drained from `head`, cleared when
  // empty and compacted when mostly drained: no allocation per slice once it has grown).
  struct FlowQueue {
    std::vector<Pending> slices;
    size_t head = 0;
    bool empty() const { return head == slices.size(); }
  };
  // A port's sending side: until when its last slice is leaving, the flows with slices waiting
  // (next first), and whether an event is set to start the next of them then. A port nobody
  // waits for takes a slice at once, with no event of its own (a relay's ports mostly idle
  // between the slices it forwards).
  struct Outbox {
    TimePoint busy_until{};
    bool dispatching = false;
    std::deque<uint32_t> turn;
    uint64_t turn_bytes = 0;  // what the flow at the front has sent in its turn
  };
  static constexpr uint64_t kTurnBytes = 16 << 20;  // a flow's turn at its port, whole slices
  struct Port {
    PortModel model;
    TimePoint down_since{};  // while !model.up
    Share out, in;
    int node = -1;
    int site = -1;
    Outbox outbox;
  };
  struct WanLink {  // one direction between two sites
    double bytes_per_second = 0;
    Duration latency{};
    bool up = true;
    TimePoint down_since{};  // while !up
    Share share;
  };
  // The link from site a to site b (null: none given).
  WanLink* wan(int a, int b);
  const WanLink* wan(int a, int b) const;
  struct Node {
    double bytes_per_second = 0;
    Share out, in;
  };
  // Holds `share` for `bytes` at `rate` starting no earlier than `start`; returns when it is done
  // (and moves `start` to when it began).
  static TimePoint hold(Share& share, double rate, uint32_t bytes, TimePoint& start);
  uint32_t node_of(const std::string& node);
  // A slice starts leaving port `from` now (or when the port's node is free).
  void start_out(uint32_t from, Pending slice);
  // The port is done with its last slice: the next slice of the flow whose turn it is.
  void next_out(uint32_t from);
  // Its one event: next_out(arg).
  void on_event(uint32_t what, uint64_t arg) override;

  EventLoop loop_;
  uint32_t self_;  // as the loop's target
  Duration latency_ = std::chrono::microseconds(5);
  Duration slice_cost_{};
  std::vector<Port> ports_;
  std::unordered_map<std::string, uint32_t> port_index_;
  std::vector<Node> nodes_;
  std::map<std::pair<uint32_t, uint32_t>, WanLink> wan_;  // (from site, to site)
  std::vector<uint64_t> wan_bytes_in_;                     // by site
  std::unordered_map<std::string, uint32_t> node_index_;
  std::unordered_map<std::string, SliceSink*> listeners_;  // unbound ones stay, null (see sink_slot)
  std::unordered_map<std::string, uint16_t> next_port_;
  std::vector<FlowQueue> flows_;       // by flow
  std::vector<PortSender*> senders_;   // by flow (null: forgotten)
};

}  // namespace deltacast::sim
