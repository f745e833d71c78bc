#include "broadcast/transport/rdma/verbs/queue_pair.h"

namespace deltacast::verbs {

std::string_view qp_state_name(QpState state) {
  switch (state) {
    case QpState::kReset: return "RESET";
    case QpState::kInit: return "INIT";
    case QpState::kReadyToReceive: return "RTR";
    case QpState::kReadyToSend: return "RTS";
    case QpState::kError: return "ERROR";
  }
  return "?";
}

Status QueuePair::step(QpState from, QpState to) {
  if (state_ != from) {
    return failed_precondition("queue pair is {}, cannot move to {} (only from {})", qp_state_name(state_),
                               qp_state_name(to), qp_state_name(from));
  }
  if (Status s = ops_->modify(to); !s.ok()) {
    to_error();
    return s.with_context(fmt::format("queue pair {} -> {}", qp_state_name(from), qp_state_name(to)));
  }
  state_ = to;
  return Status();
}

void QueuePair::to_error() {
  if (state_ == QpState::kError) return;
  if (state_ != QpState::kReset) (void)ops_->modify(QpState::kError);
  state_ = QpState::kError;
}

Status QueuePair::check_posted(Status posted) {
  if (!posted.ok()) to_error();
  return posted;
}

Status QueuePair::post_recv(uint64_t wr_id, const LocalBuffer& local) {
  if (state_ != QpState::kInit && state_ != QpState::kReadyToReceive && state_ != QpState::kReadyToSend) {
    return failed_precondition("cannot post a receive on a queue pair in {}", qp_state_name(state_));
  }
  return check_posted(ops_->post_recv(wr_id, local));
}

Status QueuePair::write_with_imm(uint64_t wr_id, const LocalBuffer& local, const RemoteBuffer& remote, uint32_t imm) {
  if (state_ != QpState::kReadyToSend) {
    return failed_precondition("cannot write on a queue pair in {}", qp_state_name(state_));
  }
  return check_posted(ops_->post_write_with_imm(wr_id, local, remote, imm));
}

Status QueuePair::send(uint64_t wr_id, const LocalBuffer& local) {
  if (state_ != QpState::kReadyToSend) {
    return failed_precondition("cannot send on a queue pair in {}", qp_state_name(state_));
  }
  return check_posted(ops_->post_send(wr_id, local));
}

}  // namespace deltacast::verbs
