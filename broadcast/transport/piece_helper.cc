#include "broadcast/transport/piece_helper.h"

#include <cstdlib>
#include <stdexcept>

#include "core/log.h"

namespace deltacast {

namespace {

// DELTACAST_PIECE_HELPERS: the choice for every connection end left on kAuto (the engine's, the
// Python package's), read once.
PieceHelperMode environment_choice() {
  static const PieceHelperMode choice = [] {
    const char* env = std::getenv("DELTACAST_PIECE_HELPERS");
    if (env == nullptr || *env == '\0') return PieceHelperMode::kAuto;
    const auto parsed = parse_piece_helper_mode(env);
    if (!parsed) log().warn("DELTACAST_PIECE_HELPERS='{}' is not on, off or auto: choosing by the machine's cores", env);
    return parsed.value_or(PieceHelperMode::kAuto);
  }();
  return choice;
}

}  // namespace

std::optional<PieceHelperMode> parse_piece_helper_mode(std::string_view text) {
  if (text == "auto") return PieceHelperMode::kAuto;
  if (text == "on") return PieceHelperMode::kOn;
  if (text == "off") return PieceHelperMode::kOff;
  return std::nullopt;
}

bool use_piece_helper(PieceHelperMode mode) {
  if (mode == PieceHelperMode::kAuto) mode = environment_choice();
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
