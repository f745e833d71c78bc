#include "broadcast/transport/sim/channel.h"

namespace deltacast::sim {

SimChannel::SimChannel(SimNetwork* network, RailSpec rail)
    : network_(network),
      rail_(std::move(rail)),
      from_(network->port_of(rail_.local.host)),
      to_(network->port_of(rail_.remote.host)),
      flow_(network->new_flow(this)),
      receiver_(network->sink_slot(rail_.remote)) {}

SimChannel::~SimChannel() {
  network_->forget_flow(flow_);
  close();
  *alive_ = false;
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
  outstanding_.push_back(Outstanding{slice, std::move(done)});
  if (!network_->passable(from_, to_)) return;  // lost on the way: only a deadline notices
  // It leaves the sender's port in this channel's turn (started); then it queues for the
  // receiver's.
  network_->send_out(from_, flow_, slice.length, id);
}

void SimChannel::started(uint64_t id, TimePoint start, TimePoint left) {
  const Outstanding* sent = find(id);
  if (sent == nullptr) return;  // failed by a reset meanwhile
  const auto reach = [this, alive = alive_, id, length = sent->slice.length, start, left] {
    if (!*alive) return;
    const TimePoint across = network_->cross(from_, to_, length, start);
    const TimePoint in = network_->enter(to_, length, start);
    network_->loop().at(std::max({left, across, in}) + network_->latency(from_, to_), [this, alive, id] {
      if (*alive) arrive(id);
    });
  };
  if (start > network_->loop().now()) {
    network_->loop().at(start, reach);  // the receiver's port is taken in time order
  } else {
    reach();
  }
}

void SimChannel::arrive(uint64_t id) {
  const Outstanding* pending = find(id);
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
  network_->loop().after(network_->latency(from_, to_), [this, alive = alive_, id, status] {
    if (!*alive) return;
    Outstanding* sent = find(id);
    if (sent == nullptr) return;
    SliceDone done = std::move(sent->done);
    settle(id);
    if (done) done(status);
  });
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
