#include "broadcast/testing/fake/channel.h"

namespace deltacast::fake {

FakeChannel::FakeChannel(FakeNetwork* network, RailSpec rail, Millis dial_grace)
    : network_(network), rail_(std::move(rail)), dial_grace_(dial_grace), worker_([this] { run(); }) {}

FakeChannel::~FakeChannel() { close(); }

void FakeChannel::send(const SliceRef& slice, const uint8_t* data, SliceDone done) {
  std::lock_guard<std::mutex> lock(mu_);
  (closed_ ? failed_ : queue_).push_back(Item{slice, data, std::move(done)});
  cv_.notify_all();
}

bool FakeChannel::ready() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !closed_ && network_->lookup(rail_.remote.to_string()) != nullptr;
}

std::optional<Millis> FakeChannel::receiver_silent_for() const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return std::nullopt;
  }
  if (network_->lookup(rail_.remote.to_string()) == nullptr) return std::nullopt;
  const auto cut = network_->impassable_since(rail_);
  if (!cut) return Millis(0);
  const auto now = std::chrono::steady_clock::now();
  if (*cut <= created_) return silence_while_dialling(now - created_, dial_grace_);  // never connected
  return std::chrono::duration_cast<Millis>(now - *cut);
}

void FakeChannel::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  ++generation_;
  while (!queue_.empty()) {
    failed_.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  cv_.notify_all();
}

void FakeChannel::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_ && !worker_.joinable()) return;
    closed_ = true;
    ++generation_;
    while (!queue_.empty()) {
      failed_.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    cv_.notify_all();
  }
  if (worker_.joinable()) worker_.join();
}

void FakeChannel::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return closed_ || !queue_.empty() || !failed_.empty(); });
    while (!failed_.empty()) {
      Item item = std::move(failed_.front());
      failed_.pop_front();
      lock.unlock();
      item.done(unavailable("{}: channel reset or closed", rail_.to_string()));
      lock.lock();
    }
    if (queue_.empty()) {
      if (closed_) return;
      continue;
    }
    Item item = std::move(queue_.front());
    queue_.pop_front();
    const uint64_t generation = generation_;
    // Play the link: wait while it (or a port) is down, then until the slice has crossed it.
    while (!network_->passable(rail_) && generation == generation_) cv_.wait_for(lock, std::chrono::milliseconds(1));
    if (generation != generation_) {
      failed_.push_back(std::move(item));
      continue;
    }
    const auto arrival = network_->transmit(rail_, item.slice.length, std::chrono::steady_clock::now());
    cv_.wait_until(lock, arrival, [&] { return generation != generation_; });
    if (generation != generation_) {
      failed_.push_back(std::move(item));
      continue;
    }
    lock.unlock();
    SliceSink* sink = network_->lookup(rail_.remote.to_string());
    Status status;
    if (sink == nullptr) {
      status = unavailable("{}: nothing listens at {}", rail_.to_string(), rail_.remote.to_string());
    } else {
      ensure_checksum(item.slice, item.data);
      auto accepted = deliver(*sink, item.slice, item.data);
      if (!accepted.ok()) {
        status = accepted.status();
      } else if (!*accepted) {
        status = corrupt("{}: the receiver rejected slice {}", rail_.to_string(), item.slice.index);
      }
    }
    item.done(status);
    lock.lock();
  }
}

}  // namespace deltacast::fake
