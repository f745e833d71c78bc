#include "broadcast/testing/faulty_channel.h"

#include <cstring>

namespace deltacast {

FaultyChannel::FaultyChannel(std::unique_ptr<Channel> inner, FaultPlan plan)
    : inner_(std::move(inner)), plan_(plan), worker_([this] { run(); }) {}

FaultyChannel::~FaultyChannel() { close(); }

void FaultyChannel::set_plan(FaultPlan plan) {
  std::unique_lock<std::mutex> lock(mu_);
  plan_ = plan;
  if (plan.mode != FaultPlan::kDrop && plan.mode != FaultPlan::kStall) {
    // Whatever was held under the old plan goes on now.
    for (auto& h : held_) {
      timers_.emplace(std::chrono::steady_clock::now(), [this, held = std::move(h)]() mutable { forward(std::move(held)); });
    }
    held_.clear();
    cv_.notify_all();
  }
}

void FaultyChannel::release() { set_plan(FaultPlan{}); }

uint64_t FaultyChannel::sends() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sends_;
}

void FaultyChannel::forward(Held held) {
  inner_->send(held.slice, held.data, std::move(held.done));
}

void FaultyChannel::send(const SliceRef& slice, const uint8_t* data, SliceDone done) {
  std::unique_lock<std::mutex> lock(mu_);
  const bool faulty = ++sends_ > plan_.after && !closed_;
  const auto now = std::chrono::steady_clock::now();
  Held held{slice, data, std::move(done)};
  switch (faulty ? plan_.mode : FaultPlan::kNone) {
    case FaultPlan::kNone:
      lock.unlock();
      forward(std::move(held));
      return;
    case FaultPlan::kRefuse:
      timers_.emplace(now, [held = std::move(held)] { held.done(unavailable("injected fault: send refused")); });
      break;
    case FaultPlan::kDelay:
      timers_.emplace(now + plan_.delay, [this, held = std::move(held)]() mutable { forward(std::move(held)); });
      break;
    case FaultPlan::kDrop:
    case FaultPlan::kStall:
      held_.push_back(std::move(held));
      break;
    case FaultPlan::kCorrupt: {
      // The payload is copied and damaged; the slice keeps the original checksum.
      ensure_checksum(held.slice, data);
      auto copy = std::make_shared<std::vector<uint8_t>>(data, data + slice.length);
      if (!copy->empty()) (*copy)[copy->size() / 2] ^= 0x5a;
      timers_.emplace(now, [this, held = std::move(held), copy]() mutable {
        SliceDone finish = std::move(held.done);
        inner_->send(held.slice, copy->data(), [copy, finish = std::move(finish)](Status s) { finish(s); });
      });
      break;
    }
  }
  cv_.notify_all();
}

void FaultyChannel::fail_held(std::unique_lock<std::mutex>& lock) {
  std::vector<Held> held;
  held.swap(held_);
  for (auto& h : held) {
    timers_.emplace(std::chrono::steady_clock::now(),
                    [h = std::move(h)] { h.done(unavailable("injected fault: dropped slice abandoned")); });
  }
  (void)lock;
  cv_.notify_all();
}

std::optional<Millis> FaultyChannel::receiver_silent_for() const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (plan_.mode == FaultPlan::kRefuse || plan_.mode == FaultPlan::kDrop || plan_.mode == FaultPlan::kStall) {
      return std::nullopt;
    }
  }
  return inner_->receiver_silent_for();
}

void FaultyChannel::reset() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    fail_held(lock);
  }
  inner_->reset();
}

void FaultyChannel::close() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
    fail_held(lock);
  }
  if (worker_.joinable()) worker_.join();
  inner_->close();
}

void FaultyChannel::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (timers_.empty()) {
      if (closed_) return;
      cv_.wait(lock);
      continue;
    }
    auto first = timers_.begin();
    if (first->first > std::chrono::steady_clock::now() && !closed_) {
      cv_.wait_until(lock, first->first);
      continue;
    }
    auto action = std::move(first->second);
    timers_.erase(first);
    lock.unlock();
    action();
    lock.lock();
  }
}

}  // namespace deltacast
