#include "broadcast/transport/rdma/wire.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include "broadcast/transport/rdma/verbs/slot_table.h"
#include "broadcast/transport/slice_header.h"
#include "core/byte_io.h"
#include "core/log.h"

namespace deltacast::rdma {

void encode_connect(const ConnectData& data, uint8_t* out) {
  store_le<uint32_t>(out, kMagic);
  store_le<uint32_t>(out + 4, kProtocolVersion);
  store_le<uint32_t>(out + 8, data.rail_index);
  store_le<uint32_t>(out + 12, 0);
  trust::encode_hello(data.hello, out + 16);
}

Result<ConnectData> decode_connect(const uint8_t* in, size_t length) {
  if (in == nullptr || length < kConnectBytes) return corrupt("connect request carries {} bytes, not {}", length, kConnectBytes);
  if (load_le<uint32_t>(in) != kMagic) return corrupt("connect request is not deltacast's (bad magic)");
  if (const uint32_t v = load_le<uint32_t>(in + 4); v != kProtocolVersion) {
    return mismatch("connect request speaks protocol {}, this receiver {}", v, kProtocolVersion);
  }
  DC_ASSIGN_OR_RETURN(trust::Hello hello, trust::decode_hello(in + 16, trust::kHelloBytes));
  return ConnectData{load_le<uint32_t>(in + 8), hello};
}

void encode_accept(const AcceptData& data, uint8_t* out) {
  std::memset(out, 0, kAcceptBytes);
  store_le<uint32_t>(out, kMagic);
  store_le<uint32_t>(out + 4, kProtocolVersion);
  store_le<uint32_t>(out + 8, data.slot_count);
  store_le<uint32_t>(out + 12, data.max_slice_bytes);
  trust::encode_hello(data.hello, out + 16);
  std::memcpy(out + 16 + trust::kHelloBytes, data.proof.data(), trust::kProofBytes);
}

Result<AcceptData> decode_accept(const uint8_t* in, size_t length) {
  if (in == nullptr || length < kAcceptBytes) return corrupt("accept carries {} bytes, not {}", length, kAcceptBytes);
  if (load_le<uint32_t>(in) != kMagic) return corrupt("accept is not deltacast's (bad magic)");
  if (const uint32_t v = load_le<uint32_t>(in + 4); v != kProtocolVersion) {
    return mismatch("receiver speaks protocol {}, this sender {}", v, kProtocolVersion);
  }
  AcceptData d{load_le<uint32_t>(in + 8), load_le<uint32_t>(in + 12), {}, {}};
  if (d.slot_count == 0 || d.slot_count > (1u << 16) || d.max_slice_bytes == 0) {
    return corrupt("receiver takes {} offers at once, slices up to {} bytes", d.slot_count, d.max_slice_bytes);
  }
  DC_ASSIGN_OR_RETURN(d.hello, trust::decode_hello(in + 16, trust::kHelloBytes));
  std::memcpy(d.proof.data(), in + 16 + trust::kHelloBytes, trust::kProofBytes);
  return d;
}

void encode_proof(const trust::Proof& proof, uint8_t out[kOfferBytes]) {
  std::memset(out, 0, kOfferBytes);
  store_le<uint32_t>(out, kProofMagic);
  std::memcpy(out + 8, proof.data(), proof.size());
}

Result<trust::Proof> decode_proof(const uint8_t* in, size_t length) {
  if (length != kOfferBytes || load_le<uint32_t>(in) != kProofMagic) {
    return permission_denied("handshake: the sender's first message is no proof ({} bytes); it must prove the "
                             "secret before offering anything", length);
  }
  trust::Proof proof;
  std::memcpy(proof.data(), in + 8, proof.size());
  return proof;
}

void Dialed::tag_offer(uint8_t* offer, const uint8_t* payload, uint32_t length) {
  const uint64_t number = offers_sent++;
  if (seal->mode() == trust::Protection::kInsecure) return;
  seal->tag_numbered(number, offer, kOfferTaggedBytes, payload, length, offer + kOfferTaggedBytes);
}

void encode_offer(const SliceRef& slice, uint32_t imm, uint8_t* out) {
  std::memset(out, 0, kOfferBytes);
  store_le<uint32_t>(out, kMagic);
  store_le<uint32_t>(out + 4, imm);
  encode_slice_header(slice, out + 8);
}

Result<Offer> decode_offer(const uint8_t* in, size_t length, uint32_t slot_count, uint32_t max_slice_bytes) {
  if (length != kOfferBytes || load_le<uint32_t>(in) != kMagic) return corrupt("malformed offer ({} bytes)", length);
  const uint32_t imm = load_le<uint32_t>(in + 4);
  if (verbs::SlotTable::slot_of(imm) >= slot_count) {
    return corrupt("offer names slot {}, the connection has {}", verbs::SlotTable::slot_of(imm), slot_count);
  }
  const SliceRef slice = decode_slice_header(in + 8);
  if (slice.length == 0 || slice.length > max_slice_bytes) {
    return corrupt("slice {} of transfer {} claims {} bytes, the limit is {}", slice.index, slice.transfer,
                   slice.length, max_slice_bytes);
  }
  return Offer{imm, slice};
}

void encode_reply(const Reply& reply, uint8_t* out) {
  std::memset(out, 0, kReplyBytes);
  store_le<uint32_t>(out, kMagic);
  store_le<uint32_t>(out + 4, reply.imm);
  store_le<uint32_t>(out + 8, static_cast<uint32_t>(reply.kind));
  store_le<uint64_t>(out + 16, reply.address);
  store_le<uint32_t>(out + 24, reply.rkey);
}

Result<Reply> decode_reply(const uint8_t* in, size_t length) {
  if (length != kReplyBytes || load_le<uint32_t>(in) != kMagic) return corrupt("malformed reply ({} bytes)", length);
  const uint32_t kind = load_le<uint32_t>(in + 8);
  if (kind > static_cast<uint32_t>(ReplyKind::kRejected)) return corrupt("reply of kind {}", kind);
  return Reply{load_le<uint32_t>(in + 4), static_cast<ReplyKind>(kind), load_le<uint64_t>(in + 16),
               load_le<uint32_t>(in + 24)};
}

namespace {

class CmQueuePairOps : public verbs::QueuePairOps {
 public:
  CmQueuePairOps(rdma_cm_id* id, ibv_qp* qp, QpTimeouts timeouts) : id_(id), qp_(qp), timeouts_(timeouts) {}

  Status modify(verbs::QpState target) override {
    ibv_qp_attr attr{};
    int mask = 0;
    if (target == verbs::QpState::kError) {
      attr.qp_state = IBV_QPS_ERR;
      mask = IBV_QP_STATE;
    } else {
      attr.qp_state = target == verbs::QpState::kInit             ? IBV_QPS_INIT
                      : target == verbs::QpState::kReadyToReceive ? IBV_QPS_RTR
                                                                  : IBV_QPS_RTS;
      if (rdma_init_qp_attr(id_, &attr, &mask) != 0) {
        return io_error("rdma_init_qp_attr({}): {}", verbs::qp_state_name(target), std::strerror(errno));
      }
      if (target == verbs::QpState::kInit) attr.qp_access_flags |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
      if (target == verbs::QpState::kReadyToSend) {
        attr.timeout = timeouts_.ack_timeout;
        attr.retry_cnt = timeouts_.retry_count;
        attr.rnr_retry = timeouts_.rnr_retry;
        mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY;
      }
    }
    if (int rc = ibv_modify_qp(qp_, &attr, mask); rc != 0) {
      return io_error("ibv_modify_qp({}): {}", verbs::qp_state_name(target), std::strerror(rc));
    }
    return Status();
  }

  Status post_write_with_imm(uint64_t wr_id, const verbs::LocalBuffer& local, const verbs::RemoteBuffer& remote,
                             uint32_t imm) override {
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.imm_data = htonl(imm);
    wr.wr.rdma.remote_addr = remote.address;
    wr.wr.rdma.rkey = remote.rkey;
    return post(wr, wr_id, local, "write");
  }

  Status post_send(uint64_t wr_id, const verbs::LocalBuffer& local) override {
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_SEND;
    return post(wr, wr_id, local, "send");
  }

  Status post_recv(uint64_t wr_id, const verbs::LocalBuffer& local) override {
    ibv_sge sge{reinterpret_cast<uint64_t>(local.address), local.length, local.lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = local.length > 0 ? &sge : nullptr;
    wr.num_sge = local.length > 0 ? 1 : 0;
    ibv_recv_wr* bad = nullptr;
    if (int rc = ibv_post_recv(qp_, &wr, &bad); rc != 0) return io_error("ibv_post_recv: {}", std::strerror(rc));
    return Status();
  }

 private:
  // Posts `wr` (its opcode and remote part filled in) as one signaled request reading `local`.
  Status post(ibv_send_wr& wr, uint64_t wr_id, const verbs::LocalBuffer& local, const char* what) {
    ibv_sge sge{reinterpret_cast<uint64_t>(local.address), local.length, local.lkey};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    if (int rc = ibv_post_send(qp_, &wr, &bad); rc != 0) return io_error("ibv_post_send({}): {}", what, std::strerror(rc));
    return Status();
  }

  rdma_cm_id* id_;
  ibv_qp* qp_;
  QpTimeouts timeouts_;
};

}  // namespace

std::unique_ptr<verbs::QueuePairOps> make_queue_pair_ops(rdma_cm_id* id, ibv_qp* qp, const QpTimeouts& timeouts) {
  return std::make_unique<CmQueuePairOps>(id, qp, timeouts);
}

Result<rdma_cm_event*> next_cm_event(rdma_event_channel* channel, Clock::time_point deadline) {
  for (;;) {
    rdma_cm_event* event = nullptr;
    if (rdma_get_cm_event(channel, &event) == 0) return event;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return io_error("rdma_get_cm_event: {}", std::strerror(errno));
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return deadline_exceeded("no connection event in time");
    pollfd p{channel->fd, POLLIN, 0};
    poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 100)));
  }
}

Status to_sockaddr(const Endpoint& endpoint, sockaddr_in* out) {
  std::memset(out, 0, sizeof(*out));
  out->sin_family = AF_INET;
  out->sin_port = htons(endpoint.port);
  if (inet_pton(AF_INET, endpoint.host.c_str(), &out->sin_addr) != 1) {
    return invalid_argument("'{}' is not an IPv4 address", endpoint.host);
  }
  return Status();
}

Status QueueResources::create(rdma_cm_id* id, ibv_pd* pd, uint32_t depth, const QpTimeouts& timeouts,
                              ibv_comp_channel* shared_channel, void* cq_context) {
  if (shared_channel != nullptr) {
    completion_channel = shared_channel;
    owns_completion_channel = false;
  } else {
    completion_channel = ibv_create_comp_channel(id->verbs);
    if (completion_channel == nullptr) return io_error("ibv_create_comp_channel: {}", std::strerror(errno));
    fcntl(completion_channel->fd, F_SETFL, fcntl(completion_channel->fd, F_GETFL) | O_NONBLOCK);
  }
  cq = ibv_create_cq(id->verbs, static_cast<int>(2 * depth), cq_context, completion_channel, 0);
  if (cq == nullptr) return io_error("ibv_create_cq: {}", std::strerror(errno));
  if (int rc = ibv_req_notify_cq(cq, 0); rc != 0) return io_error("ibv_req_notify_cq: {}", std::strerror(rc));
  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = depth;
  init.cap.max_recv_wr = depth;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  qp = ibv_create_qp(pd, &init);
  if (qp == nullptr) return io_error("ibv_create_qp: {}", std::strerror(errno));
  queue_pair = std::make_unique<verbs::QueuePair>(make_queue_pair_ops(id, qp, timeouts));
  return Status();
}

void QueueResources::destroy() {
  queue_pair.reset();
  if (qp != nullptr) ibv_destroy_qp(qp);
  qp = nullptr;
  if (cq != nullptr) ibv_destroy_cq(cq);
  cq = nullptr;
  if (completion_channel != nullptr && owns_completion_channel) ibv_destroy_comp_channel(completion_channel);
  completion_channel = nullptr;
}

void rearm_completions(ibv_comp_channel* channel) {
  ibv_cq* cq = nullptr;
  void* context = nullptr;
  while (ibv_get_cq_event(channel, &cq, &context) == 0) {
    ibv_ack_cq_events(cq, 1);
    ibv_req_notify_cq(cq, 0);
  }
}

Result<int> poll_completions(ibv_cq* cq, ibv_wc* out, int max) {
  const int n = ibv_poll_cq(cq, max, out);
  if (n < 0) return io_error("ibv_poll_cq failed");
  return n;
}

}  // namespace deltacast::rdma

namespace deltacast::rdma {


std::string printable(const void* data, size_t length) {
  std::string out;
  const auto* p = static_cast<const char*>(data);
  for (size_t i = 0; p != nullptr && i < length && p[i] != 0; ++i) out += std::isprint(p[i]) ? p[i] : '?';
  return out;
}

Dialed::~Dialed() {
  reply_registration = verbs::Registration();
  proof_registration = verbs::Registration();
  queues.destroy();
  if (pd != nullptr) ibv_dealloc_pd(pd);
  if (id != nullptr) rdma_destroy_id(id);
  if (events != nullptr) rdma_destroy_event_channel(events);
}

Status refuse_encryption(trust::Protection mode) {
  if (mode != trust::Protection::kEncrypted) return Status();
  return permission_denied("RDMA rails do not encrypt (the NIC reads slices where they lie): give TCP rails for an "
                           "encrypted session, or authenticated for RDMA");
}

Result<std::unique_ptr<Dialed>> dial(const RailSpec& rail, uint32_t rail_index, const trust::Trust& trust,
                                     uint32_t slots, const QpTimeouts& timeouts, std::chrono::milliseconds timeout,
                                     bool send_proof) {
  DC_RETURN_IF_ERROR(refuse_encryption(trust.protection));
  DC_ASSIGN_OR_RETURN(const trust::Hello mine, trust::fresh_hello(trust.protection, trust::Purpose::kData));
  const ConnectData hello{rail_index, mine};
  auto c = std::make_unique<Dialed>();
  c->events = rdma_create_event_channel();
  if (c->events == nullptr) return io_error("rdma_create_event_channel: {}", std::strerror(errno));
  fcntl(c->events->fd, F_SETFL, fcntl(c->events->fd, F_GETFL) | O_NONBLOCK);
  if (rdma_create_id(c->events, &c->id, nullptr, RDMA_PS_TCP) != 0) return io_error("rdma_create_id: {}", std::strerror(errno));
  sockaddr_in local{}, remote{};
  DC_RETURN_IF_ERROR(to_sockaddr(Endpoint{rail.local.host, 0}, &local));
  DC_RETURN_IF_ERROR(to_sockaddr(rail.remote, &remote));
  const auto deadline = Clock::now() + timeout;
  const int timeout_ms = static_cast<int>(timeout.count());
  // Each step's event must be the one expected; anything else fails the attempt, named.
  const auto expect = [&](rdma_cm_event_type wanted, const char* step) -> Result<rdma_cm_event*> {
    auto next = next_cm_event(c->events, deadline);
    if (!next.ok()) return next.status().with_context(step);
    rdma_cm_event* event = *next;
    if (event->event == wanted) return event;
    std::string why = rdma_event_str(event->event);
    if (event->event == RDMA_CM_EVENT_REJECTED) {
      const std::string reason = printable(event->param.conn.private_data, event->param.conn.private_data_len);
      why += reason.empty() ? " (no RDMA listener there?)" : ": " + reason;
    }
    rdma_ack_cm_event(event);
    return unavailable("{}: {}", step, why);
  };
  if (rdma_resolve_addr(c->id, reinterpret_cast<sockaddr*>(&local), reinterpret_cast<sockaddr*>(&remote), timeout_ms) != 0) {
    return unavailable("rdma_resolve_addr: {}", std::strerror(errno));
  }
  DC_ASSIGN_OR_RETURN(rdma_cm_event * resolved, expect(RDMA_CM_EVENT_ADDR_RESOLVED, "resolving the address"));
  rdma_ack_cm_event(resolved);
  if (rdma_resolve_route(c->id, timeout_ms) != 0) return unavailable("rdma_resolve_route: {}", std::strerror(errno));
  DC_ASSIGN_OR_RETURN(rdma_cm_event * routed, expect(RDMA_CM_EVENT_ROUTE_RESOLVED, "resolving the route"));
  rdma_ack_cm_event(routed);

  c->pd = ibv_alloc_pd(c->id->verbs);
  if (c->pd == nullptr) return io_error("ibv_alloc_pd: {}", std::strerror(errno));
  const uint32_t depth = kReceivesPerSlot * slots;
  // Sends: an offer and a write per slot, and the proof once.
  DC_RETURN_IF_ERROR(c->queues.create(c->id, c->pd, depth + 1, timeouts, nullptr, nullptr));
  DC_RETURN_IF_ERROR(c->queues.queue_pair->to_init());
  c->replies = AlignedBuffer(depth * kReplyBytes);
  DC_ASSIGN_OR_RETURN(c->reply_registration,
                      verbs::register_host(c->pd, c->replies.data(), c->replies.size(), verbs::kLocalWrite));
  for (uint32_t i = 0; i < depth; ++i) {
    DC_RETURN_IF_ERROR(c->queues.queue_pair->post_recv(
        kReplyReceiveTag | i,
        {c->replies.data() + i * kReplyBytes, static_cast<uint32_t>(kReplyBytes), c->reply_registration.lkey()}));
  }

  uint8_t request[kConnectBytes];
  encode_connect(hello, request);
  rdma_conn_param param{};
  param.private_data = request;
  param.private_data_len = sizeof(request);
  param.qp_num = c->queues.qp->qp_num;
  param.retry_count = timeouts.retry_count;
  param.rnr_retry_count = timeouts.rnr_retry;
  if (rdma_connect(c->id, &param) != 0) return unavailable("rdma_connect: {}", std::strerror(errno));
  log().debug("rdma: {}: connect request sent (queue pair {})", rail.to_string(), c->queues.qp->qp_num);
  // The queue pair is ours (not rdma_cm's), so the response comes to us to finish the handshake.
  DC_ASSIGN_OR_RETURN(rdma_cm_event * response, expect(RDMA_CM_EVENT_CONNECT_RESPONSE, "connecting"));
  auto accepted = decode_accept(static_cast<const uint8_t*>(response->param.conn.private_data),
                                response->param.conn.private_data_len);
  rdma_ack_cm_event(response);
  // The receiver's terms and its proof: a receiver that does not hold the secret (or an accept
  // replayed or altered on the way) gets nothing of this side's.
  const auto checked = [&]() -> Result<trust::SessionKeys> {
    DC_RETURN_IF_ERROR(accepted.status());
    DC_ASSIGN_OR_RETURN(const trust::Protection mode,
                        trust::agree_terms(trust::Role::kClient, trust.protection, mine, accepted->hello));
    DC_RETURN_IF_ERROR(refuse_encryption(mode));
    DC_RETURN_IF_ERROR(
        trust::check_proof(trust.secret, trust::Role::kServer, mine, accepted->hello, accepted->proof.data()));
    return trust::derive_keys(trust.secret, mine, accepted->hello, mode);
  }();
  if (!checked.ok()) {
    // The reason rides in the rejection, so the receiver names it too.
    const std::string reason = checked.status().message().substr(0, 140);
    rdma_reject(c->id, reason.c_str(), static_cast<uint8_t>(reason.size() + 1));
    return checked.status();
  }
  c->remote = *accepted;
  c->seal = std::move(trust::seals_for(*checked, trust::Role::kClient).outgoing);
  c->proof = AlignedBuffer(kOfferBytes);
  encode_proof(trust::prove(trust.secret, trust::Role::kClient, mine, accepted->hello), c->proof.data());
  DC_ASSIGN_OR_RETURN(c->proof_registration, verbs::register_host(c->pd, c->proof.data(), c->proof.size(), 0));
  DC_RETURN_IF_ERROR(c->queues.queue_pair->to_ready_to_receive());
  DC_RETURN_IF_ERROR(c->queues.queue_pair->to_ready_to_send());
  if (rdma_establish(c->id) != 0) return unavailable("rdma_establish: {}", std::strerror(errno));
  // The proof is this side's first SEND: the receiver takes no offer before it.
  if (send_proof) {
    DC_RETURN_IF_ERROR(c->queues.queue_pair->send(
        kProofSendTag, {c->proof.data(), static_cast<uint32_t>(kOfferBytes), c->proof_registration.lkey()}));
  }
  ibv_qp_attr applied{};
  ibv_qp_init_attr init{};
  if (ibv_query_qp(c->queues.qp, &applied, IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT, &init) == 0) {
    log().debug("rdma: {}: queue pair {} ack timeout {} ({:.1f} ms), {} retries", rail.to_string(), c->queues.qp->qp_num,
                applied.timeout, 4.096e-3 * static_cast<double>(1u << applied.timeout), applied.retry_cnt);
  }
  return c;
}

}  // namespace deltacast::rdma
