#include "broadcast/transport/sim/channel.h"

#include <cassert>

namespace deltacast::sim {

SimChannel::SimChannel(SimNetwork* network, RailSpec rail, Millis dial_grace)
    : network_(network),
      rail_(std::move(rail)),
      created_(network->loop().now()),
      dial_grace_(dial_grace),
      from_(network->port_of(rail_.local.host)),
      to_(network->port_of(rail_.remote.host)),
      flow_(network->new_flow(this)),
      receiver_(network->sink_slot(rail_.remote)),
      target_(network->loop().add_target(this)) {}

SimChannel::~SimChannel() {
  network_->forget_flow(flow_);
  close();
  network_->loop().remove_target(target_);
}

std::optional<Millis> SimChannel::receiver_silent_for() const {
  if (closed_ || *receiver_ == nullptr) return std::nullopt;
  const auto cut = network_->impassable_since(to_, from_);
  if (!cut) return Millis(0);
  const TimePoint now = network_->loop().now();
  if (*cut <= created_) {  // never connected
    return silence_while_dialling(now - created_, dial_grace_);
  }
  const TimePoint last_heard = *cut + network_->latency(to_, from_);
  return now > last_heard ? std::chrono::duration_cast<Millis>(now - last_heard) : Millis(0);
}

void SimChannel::send(const SliceRef& slice, const uint8_t*, SliceDone done) {
  if (closed_) {
    // Never inside send(): the failure is an event of its own.
    network_->loop().after(Duration::zero(), [done = std::move(done), name = rail_.to_string()] {
      done(unavailable("{}: channel closed", name));
    });
    return;
  }
  const uint64_t id = next_id_++;  // outstanding_ holds every id from first_id_ on
  outstanding_.push_back(Outstanding{slice, std::move(done), Status{}});
  if (!network_->passable(from_, to_)) return;  // lost on the way: only a deadline notices
  // It leaves the sender's port in this channel's turn (started); then it queues for the
  // receiver's.
  network_->send_out(from_, flow_, slice.length, id);
}

void SimChannel::started(uint64_t id, TimePoint start, TimePoint left) {
  const Outstanding* sent = find(id);
  if (sent == nullptr) return;  // failed by a reset meanwhile
  const Leaving slice{id, sent->slice.length, start, left};
  if (start > network_->loop().now()) {
    leaving_.push_back(slice);
    network_->loop().at(start, target_, kReach, id);  // the receiver's port is taken in time order
  } else {
    take_wire(slice);
  }
}

void SimChannel::reach(uint64_t id) {
  // In order: a port starts each slice once the one before it started (SimNetwork::send_out).
  assert(!leaving_.empty() && leaving_.front().id == id);
  if (leaving_.empty() || leaving_.front().id != id) return;
  const Leaving slice = leaving_.front();
  leaving_.pop_front();
  take_wire(slice);
}

void SimChannel::take_wire(const Leaving& slice) {
  const TimePoint across = network_->cross(from_, to_, slice.bytes, slice.start);
  const TimePoint in = network_->enter(to_, slice.bytes, slice.start);
  network_->loop().at(std::max({slice.left, across, in}) + network_->latency(from_, to_), target_, kArrive, slice.id);
}

void SimChannel::arrive(uint64_t id) {
  Outstanding* pending = find(id);
  if (pending == nullptr) return;  // failed by a reset meanwhile
  if (!network_->passable(from_, to_)) return;  // a port or WAN link went down under it
  const SliceRef slice = pending->slice;  // a copy: the receiver may reset this channel
  SliceSink* sink = *receiver_;
  Status status;
  if (sink == nullptr) {
    status = unavailable("{}: nothing listens at {}", rail_.to_string(), rail_.remote.to_string());
  } else if (auto landing = sink->begin(slice, nullptr); !landing.ok()) {
    status = landing.status();
  } else if (!sink->complete(slice, *landing, /*verified=*/true)) {
    status = corrupt("{}: the receiver did not accept slice {}", rail_.to_string(), slice.index);
  }
  if (Outstanding* still = find(id)) still->status = std::move(status);  // the sink may have reset it
  network_->loop().at(network_->loop().now() + network_->latency(from_, to_), target_, kAcknowledged, id);
}

void SimChannel::acknowledged(uint64_t id) {
  Outstanding* sent = find(id);
  if (sent == nullptr) return;
  SliceDone done = std::move(sent->done);
  const Status status = std::move(sent->status);
  settle(id);
  if (done) done(status);
}

void SimChannel::on_event(uint32_t what, uint64_t id) {
  switch (what) {
    case kReach:
      reach(id);
      break;
    case kArrive:
      arrive(id);
      break;
    case kAcknowledged:
      acknowledged(id);
      break;
  }
}

bool SimChannel::ready() const { return !closed_ && *receiver_ != nullptr; }

SimChannel::Outstanding* SimChannel::find(uint64_t id) {
  if (id < first_id_ || id - first_id_ >= outstanding_.size()) return nullptr;
  Outstanding& sent = outstanding_[id - first_id_];
  return sent.settled ? nullptr : &sent;
}

void SimChannel::settle(uint64_t id) {
  if (Outstanding* sent = find(id)) sent->settled = true;
  while (!outstanding_.empty() && outstanding_.front().settled) {
    outstanding_.pop_front();
    ++first_id_;
  }
}

void SimChannel::fail_outstanding(const char* why) {
  // Taken out first: a completion may send again on this channel.
  std::deque<Outstanding> failed;
  failed.swap(outstanding_);
  first_id_ = next_id_;
  for (Outstanding& sent : failed) {
    if (!sent.settled && sent.done) sent.done(unavailable("{}: {}", rail_.to_string(), why));
  }
}

void SimChannel::reset() { fail_outstanding("channel reset"); }

void SimChannel::close() {
  if (closed_) return;
  closed_ = true;
  fail_outstanding("channel closed");
}

}  // namespace deltacast::sim
