#include "broadcast/transport/piece_helper.h"

#include <stdexcept>

namespace deltacast {

bool use_piece_helper(PieceHelperMode mode) {
  switch (mode) {
    case PieceHelperMode::kOn:
      return true;
    case PieceHelperMode::kOff:
      return false;
    case PieceHelperMode::kAuto:
      break;
  }
  return std::thread::hardware_concurrency() >= kPieceHelperCores;
}

PieceHelper::PieceHelper() : thread_([this] { run(); }) {}

PieceHelper::~PieceHelper() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  posted_cv_.notify_all();
  thread_.join();
}

void PieceHelper::begin(Work work) {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_ != posted_) throw std::logic_error("PieceHelper::begin with pieces still pending");
  work_ = std::move(work);
}

uint64_t PieceHelper::post(const uint8_t* in, uint8_t* out, size_t size) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return posted_ - done_ < kMaxPending; });
  ring_[posted_ % kMaxPending] = Piece{in, out, size};
  const uint64_t ticket = posted_++;
  lock.unlock();
  posted_cv_.notify_one();
  return ticket;
}

void PieceHelper::wait(uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return done_ > ticket; });
}

void PieceHelper::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return done_ == posted_; });
}

void PieceHelper::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    posted_cv_.wait(lock, [&] { return stopping_ || done_ < posted_; });
    if (done_ == posted_) return;  // stopping, nothing left
    const Piece piece = ring_[done_ % kMaxPending];
    lock.unlock();
    work_(piece.in, piece.out, piece.size);
    lock.lock();
    ++done_;
    done_cv_.notify_all();
  }
}

}  // namespace deltacast
