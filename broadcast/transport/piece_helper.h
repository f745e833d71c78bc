// A helper thread beside one end of a connection: it does the per-byte work on a frame's payload
// (the tag as it goes out or lands, encryption or decryption, the content hash) piece by piece,
// in the order the pieces were posted, while the connection's own thread copies the next piece
// into or out of the socket. A rail end is then as fast as the slower of the copy and the work,
// not the two one after the other: the difference between a rail that authenticates at the
// copy's rate and one at half of it, wherever the machine has a core for each.
//
// One frame at a time: begin() names the work for the frame's pieces, post() queues a piece (it
// waits while kMaxPending are queued), wait() waits for one, drain() for all. The work's state
// (a seal, a hash) passes between the threads through the helper's lock, so the owner may use it
// again once drain() returns.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>

namespace deltacast {

// Whether a connection end runs its payload's per-byte work on a PieceHelper.
enum class PieceHelperMode : uint8_t {
  kAuto = 0,  // DELTACAST_PIECE_HELPERS=on|off where set, else where the machine has kPieceHelperCores cores
  kOn = 1,
  kOff = 2,
};

// Below this many cores the helpers would take turns on the cores the rails' own threads keep busy:
// the same work, plus handing it over (on 2 cores, 0.78-0.84x of the rate without them). A node
// relaying over 8 rails runs 16 rail threads or more, hence 16: a machine where a rail end and its
// helper can each have a core.
inline constexpr unsigned kPieceHelperCores = 16;

// "auto", "on" or "off" (what DELTACAST_PIECE_HELPERS and the benchmarks' --piece-helpers take);
// nothing for another text.
std::optional<PieceHelperMode> parse_piece_helper_mode(std::string_view text);

bool use_piece_helper(PieceHelperMode mode);

class PieceHelper {
 public:
  using Work = std::function<void(const uint8_t* in, uint8_t* out, size_t size)>;
  static constexpr size_t kMaxPending = 4;

  PieceHelper();
  ~PieceHelper();
  PieceHelper(const PieceHelper&) = delete;
  PieceHelper& operator=(const PieceHelper&) = delete;

  // The work for the pieces posted from here on; only with nothing pending (after drain()).
  void begin(Work work);
  // Queues a piece; returns its ticket for wait().
  uint64_t post(const uint8_t* in, uint8_t* out, size_t size);
  void wait(uint64_t ticket);
  void drain();

 private:
  struct Piece {
    const uint8_t* in = nullptr;
    uint8_t* out = nullptr;
    size_t size = 0;
  };
  void run();

  std::mutex mu_;
  std::condition_variable posted_cv_;
  std::condition_variable done_cv_;
  Work work_;
  Piece ring_[kMaxPending];
  uint64_t posted_ = 0;  // pieces posted so far (the next ticket)
  uint64_t done_ = 0;    // pieces done so far, in order
  bool stopping_ = false;
  std::thread thread_;  // last: it starts in the constructor
};

// Drains a helper on every way out of a scope (an error mid-frame included): nothing the helper
// may still read or write (a record's bytes, a staging slot) is let go while it does.
class DrainOnExit {
 public:
  explicit DrainOnExit(PieceHelper* helper) : helper_(helper) {}
  ~DrainOnExit() {
    if (helper_ != nullptr) helper_->drain();
  }
  DrainOnExit(const DrainOnExit&) = delete;
  DrainOnExit& operator=(const DrainOnExit&) = delete;

 private:
  PieceHelper* helper_;
};

}  // namespace deltacast
