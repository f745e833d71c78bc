#include "broadcast/transport/sim/channel.h"

namespace deltacast::sim {

SimChannel::SimChannel(SimNetwork* network, RailSpec rail)
    : network_(network),
      rail_(std::move(rail)),
      from_(network->port_of(rail_.local.host)),
      to_(network->port_of(rail_.remote.host)),
      receiver_(network->sink_slot(rail_.remote)) {}

SimChannel::~SimChannel() {
  close();
  *alive_ = false;
}

void SimChannel::send(const SliceRef& slice, const uint8_t*, SliceDone done) {
  const uint64_t id = next_id_++;
  if (closed_) {
    // Never inside send(): the failure is an event of its own.
    network_->loop().after(Duration::zero(), [done = std::move(done), name = rail_.to_string()] {
      done(unavailable("{}: channel closed", name));
    });
    return;
  }
  outstanding_.emplace(id, std::move(done));
  if (!network_->up(from_) || !network_->up(to_)) return;  // lost on the way: only a deadline notices
  // It leaves the sender's port in turn; once it starts leaving it queues for the receiver's.
  const auto [start, left] = network_->leave(from_, slice.length);
  network_->loop().at(start, [this, alive = alive_, id, slice, start = start, left = left] {
    if (!*alive) return;
    const TimePoint in = network_->enter(to_, slice.length, start);
    network_->loop().at(std::max(left, in) + network_->latency(), [this, alive, id, slice] {
      if (*alive) arrive(id, slice);
    });
  });
}

void SimChannel::arrive(uint64_t id, const SliceRef& slice) {
  if (!outstanding_.count(id)) return;  // failed by a reset meanwhile
  if (!network_->up(from_) || !network_->up(to_)) return;  // a port went down under it
  SliceSink* sink = *receiver_;
  Status status;
  if (sink == nullptr) {
    status = unavailable("{}: nothing listens at {}", rail_.to_string(), rail_.remote.to_string());
  } else if (auto landing = sink->begin(slice, nullptr); !landing.ok()) {
    status = landing.status();
  } else if (!sink->complete(slice, *landing, /*verified=*/true)) {
    status = corrupt("{}: the receiver did not accept slice {}", rail_.to_string(), slice.index);
  }
  network_->loop().after(network_->latency(), [this, alive = alive_, id, status] {
    if (!*alive) return;
    auto it = outstanding_.find(id);
    if (it == outstanding_.end()) return;
    SliceDone done = std::move(it->second);
    outstanding_.erase(it);
    done(status);
  });
}

bool SimChannel::ready() const { return !closed_ && *receiver_ != nullptr; }

void SimChannel::fail_outstanding(const char* why) {
  // Taken out first: a completion may send again on this channel.
  std::map<uint64_t, SliceDone> failed;
  failed.swap(outstanding_);
  for (auto& [id, done] : failed) done(unavailable("{}: {}", rail_.to_string(), why));
}

void SimChannel::reset() { fail_outstanding("channel reset"); }

void SimChannel::close() {
  if (closed_) return;
  closed_ = true;
  fail_outstanding("channel closed");
}

}  // namespace deltacast::sim
