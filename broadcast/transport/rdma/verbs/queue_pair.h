// A queue pair's life as a small state machine over a thin verbs shim: the
// transitions RESET -> INIT -> RTR -> RTS are taken in order and only once,
// posting is refused outside the states where the hardware accepts it, and
// any failed transition or post leaves the pair in ERROR, where it stays.
// The shim (QueuePairOps) is the only place that touches libibverbs, so unit
// tests drive every transition with a fake and no device.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "core/status.h"

namespace deltacast::verbs {

enum class QpState { kReset, kInit, kReadyToReceive, kReadyToSend, kError };
std::string_view qp_state_name(QpState state);

// Local buffer of a work request: address, length and the key of its registration.
struct LocalBuffer {
  void* address = nullptr;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

// Remote buffer of a one-sided write.
struct RemoteBuffer {
  uint64_t address = 0;
  uint32_t rkey = 0;
};

class QueuePairOps {
 public:
  virtual ~QueuePairOps() = default;
  // Moves the hardware queue pair to `target` (the attributes are the shim's business).
  virtual Status modify(QpState target) = 0;
  virtual Status post_write_with_imm(uint64_t wr_id, const LocalBuffer& local, const RemoteBuffer& remote,
                                     uint32_t imm) = 0;
  virtual Status post_send(uint64_t wr_id, const LocalBuffer& local) = 0;
  virtual Status post_recv(uint64_t wr_id, const LocalBuffer& local) = 0;
};

class QueuePair {
 public:
  explicit QueuePair(std::unique_ptr<QueuePairOps> ops) : ops_(std::move(ops)) {}

  Status to_init() { return step(QpState::kReset, QpState::kInit); }
  Status to_ready_to_receive() { return step(QpState::kInit, QpState::kReadyToReceive); }
  Status to_ready_to_send() { return step(QpState::kReadyToReceive, QpState::kReadyToSend); }
  // Flushes whatever is posted (the hardware completes it with errors).
  void to_error();

  // Receives may be posted from INIT on (so that they are there before the peer's first write).
  Status post_recv(uint64_t wr_id, const LocalBuffer& local);
  Status write_with_imm(uint64_t wr_id, const LocalBuffer& local, const RemoteBuffer& remote, uint32_t imm);
  Status send(uint64_t wr_id, const LocalBuffer& local);

  QpState state() const { return state_; }
  QueuePairOps& ops() { return *ops_; }

 private:
  Status step(QpState from, QpState to);
  Status check_posted(Status posted);

  std::unique_ptr<QueuePairOps> ops_;
  QpState state_ = QpState::kReset;
};

}  // namespace deltacast::verbs
