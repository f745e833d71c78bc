#include "broadcast/transport/rdma/listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <exception>
#include <cerrno>
#include <cstring>

#include "broadcast/transport/rdma/verbs/slot_table.h"
#include "core/trust/handshake.h"
#include "core/log.h"

namespace deltacast::rdma {

namespace {

std::string peer_of(rdma_cm_id* id) {
  const sockaddr* addr = rdma_get_peer_addr(id);
  if (addr == nullptr || addr->sa_family != AF_INET) return "?";
  const auto* in = reinterpret_cast<const sockaddr_in*>(addr);
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
  return fmt::format("{}:{}", text, ntohs(in->sin_port));
}

// A slice's place in staging, lent to the peer that offered it until its write arrives.
struct Grant {
  bool open = false;
  uint32_t imm = 0;
  uint64_t number = 0;                // the offer's place in the connection: its tag's number
  std::array<uint8_t, kOfferBytes> offer{};  // as it came: what its tag covers, and the tag
  SliceRef slice;
  Landing landing;
  verbs::Registration window;  // exactly the slice's bytes, writable by the peer
  std::shared_ptr<std::atomic<bool>> superseded;  // set when a newer copy of the slice took over
};

// Ends a grant: the window is revoked first, so that no write of the peer's reaches the bytes
// once they are let go; returns the landing to complete.
Landing close_grant(Grant& grant) {
  grant.window = verbs::Registration();
  grant.open = false;
  return std::move(grant.landing);
}

}  // namespace

struct RdmaListener::Connection {
  rdma_cm_id* id = nullptr;
  std::string peer;
  // A protection domain of its own: a memory key is valid on every queue pair of its domain, so
  // in a shared one a peer that learned another connection's key could write where it was granted.
  ibv_pd* pd = nullptr;
  QueueResources queues;
  AlignedBuffer receives;  // offers land here (writes with immediate consume a receive too)
  verbs::Registration receive_registration;
  AlignedBuffer replies;  // per slot: the grant's and the final answer's
  verbs::Registration reply_registration;
  uint32_t slot_count = 0;
  std::vector<Grant> grants;  // by slot
  // The handshake: the sender's proof is its first message; nothing else is taken before it holds.
  trust::Hello client_hello, server_hello;
  bool proven = false;
  std::chrono::steady_clock::time_point accepted_at;  // an unproven connection is dropped handshake_timeout after
  std::unique_ptr<trust::FrameSeal> seal;  // checks the offers' tags (sender to receiver); its mode is the agreed one
  uint64_t offers_taken = 0;               // the next offer's number
  uint64_t slices_in_place = 0;  // written by the peer's NIC into staging and accepted
  uint64_t bytes_in_place = 0;

  ~Connection() {
    queues.destroy();
    grants.clear();
    receive_registration = verbs::Registration();
    reply_registration = verbs::Registration();
    if (pd != nullptr) ibv_dealloc_pd(pd);
  }
};

RdmaListener::RdmaListener(SliceSink* sink, ListenOptions options, RdmaConfig config)
    : sink_(sink), options_(std::move(options)), config_(config) {}

Result<std::unique_ptr<RdmaListener>> RdmaListener::create(const std::vector<Endpoint>& endpoints, SliceSink* sink,
                                                           const ListenOptions& options, const RdmaConfig& config) {
  if (!options.netns.empty()) return unimplemented("the RDMA backend does not open connections inside network namespaces");
  std::unique_ptr<RdmaListener> l(new RdmaListener(sink, options, config));
  l->events_ = rdma_create_event_channel();
  if (l->events_ == nullptr) return unavailable("rdma_create_event_channel: {}", std::strerror(errno));
  fcntl(l->events_->fd, F_SETFL, fcntl(l->events_->fd, F_GETFL) | O_NONBLOCK);
  for (const Endpoint& e : endpoints) {
    sockaddr_in addr{};
    DC_RETURN_IF_ERROR(to_sockaddr(e, &addr));
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(l->events_, &id, nullptr, RDMA_PS_TCP) != 0) return io_error("rdma_create_id: {}", std::strerror(errno));
    l->listen_ids_.push_back(id);
    if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&addr)) != 0) {
      return unavailable("cannot listen for RDMA on {}: {} (no RDMA device on that address?)", e.to_string(),
                         std::strerror(errno));
    }
    if (id->verbs == nullptr) return unavailable("{} is not on an RDMA device", e.to_string());
    if (rdma_listen(id, 64) != 0) return io_error("rdma_listen on {}: {}", e.to_string(), std::strerror(errno));
    l->endpoints_.push_back(Endpoint{e.host, ntohs(rdma_get_src_port(id))});
  }
  l->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  l->thread_ = std::thread([raw = l.get()] { raw->run(); });
  return l;
}

RdmaListener::~RdmaListener() {
  close();
  for (rdma_cm_id* id : listen_ids_) rdma_destroy_id(id);
  for (auto& [context, d] : devices_) {
    if (d.completions != nullptr) ibv_destroy_comp_channel(d.completions);
  }
  if (events_ != nullptr) rdma_destroy_event_channel(events_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void RdmaListener::close() {
  if (closed_.exchange(true)) return;
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }
  if (thread_.joinable()) thread_.join();
  while (!connections_.empty()) drop(connections_.begin()->first, unavailable("listener closed"));
}

void RdmaListener::note_drop(const std::string& peer, const Status& why) {
  log().warn("dropping RDMA connection from {}: {}", peer, why.to_string());
}

void RdmaListener::run() {
  bool busy = false;
  while (!closed_) {
    std::vector<pollfd> fds = {{wake_fd_, POLLIN, 0}, {events_->fd, POLLIN, 0}};
    for (auto& [context, d] : devices_) fds.push_back({d.completions->fd, POLLIN, 0});
    poll(fds.data(), fds.size(), busy ? 0 : 100);
    rdma_cm_event* event = nullptr;
    while (rdma_get_cm_event(events_, &event) == 0) on_cm_event(event);
    for (auto& [context, d] : devices_) rearm_completions(d.completions);
    // A few completions per connection per turn: rails are served in turn, and connection
    // requests are answered between slots, not after a whole backlog.
    busy = false;
    std::vector<Connection*> turn;
    for (auto& [raw, owned] : connections_) turn.push_back(raw);
    for (Connection* c : turn) busy = serve_some(c) || busy;
    drop_superseded();
    drop_unproven();
    uint64_t drained = 0;
    (void)!read(wake_fd_, &drained, sizeof(drained));
  }
}

void RdmaListener::on_cm_event(rdma_cm_event* event) {
  rdma_cm_id* id = event->id;
  const rdma_cm_event_type type = event->event;
  if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
    // Copy what the request carried before the event is acked (it owns the bytes).
    std::vector<uint8_t> data(static_cast<const uint8_t*>(event->param.conn.private_data),
                              static_cast<const uint8_t*>(event->param.conn.private_data) +
                                  (event->param.conn.private_data ? event->param.conn.private_data_len : 0));
    rdma_ack_cm_event(event);
    // libcrypto failing (no random bytes, no HKDF) refuses this peer; it must not end the thread.
    try {
      accept(id, data.data(), data.size());
    } catch (const std::exception& e) {
      if (by_id_.count(id) != 0) {
        drop(by_id_[id], internal_error("{}", e.what()));
      } else {
        refuse(id, peer_of(id), internal_error("{}", e.what()));
      }
    }
    return;
  }
  // A sender that refused this receiver's accept (its proof, its mode) says why in the rejection.
  const std::string reason = type == RDMA_CM_EVENT_REJECTED
                                 ? printable(event->param.conn.private_data, event->param.conn.private_data_len)
                                 : std::string();
  rdma_ack_cm_event(event);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return;
  if (type == RDMA_CM_EVENT_ESTABLISHED) {
    log().debug("rdma: connection from {} established", it->second->peer);
  } else if (type == RDMA_CM_EVENT_DISCONNECTED || type == RDMA_CM_EVENT_DEVICE_REMOVAL ||
             type == RDMA_CM_EVENT_CONNECT_ERROR || type == RDMA_CM_EVENT_UNREACHABLE ||
             type == RDMA_CM_EVENT_REJECTED) {  // the sender gave up before our accept reached it
    drop(it->second, reason.empty() ? unavailable("{}", rdma_event_str(type))
                                    : permission_denied("the sender refused this receiver: {}", reason));
  }
}

void RdmaListener::refuse(rdma_cm_id* id, const std::string& peer, const Status& why) {
  const std::string reason = why.to_string().substr(0, 120);
  rdma_reject(id, reason.c_str(), static_cast<uint8_t>(reason.size() + 1));
  note_drop(peer, why);
  rdma_destroy_id(id);
}

Result<RdmaListener::Device*> RdmaListener::device_for(ibv_context* context) {
  Device& d = devices_[context];
  if (d.completions == nullptr) {
    d.completions = ibv_create_comp_channel(context);
    if (d.completions == nullptr) return io_error("ibv_create_comp_channel: {}", std::strerror(errno));
    fcntl(d.completions->fd, F_SETFL, fcntl(d.completions->fd, F_GETFL) | O_NONBLOCK);
  }
  return &d;
}

void RdmaListener::accept(rdma_cm_id* id, const void* private_data, size_t length) {
  const std::string peer = peer_of(id);
  auto hello = decode_connect(static_cast<const uint8_t*>(private_data), length);
  if (!hello.ok()) return refuse(id, peer, hello.status());
  auto mine = trust::fresh_hello(options_.trust.protection, trust::Purpose::kData);
  if (!mine.ok()) return refuse(id, peer, mine.status());
  auto mode = trust::agree_terms(trust::Role::kServer, options_.trust.protection, hello->hello, *mine);
  if (!mode.ok()) return refuse(id, peer, mode.status());
  if (Status plain = refuse_encryption(*mode); !plain.ok()) return refuse(id, peer, plain);
  auto keys = trust::derive_keys(options_.trust.secret, hello->hello, *mine, *mode);
  if (!keys.ok()) return refuse(id, peer, keys.status());
  if (connections_.size() >= config_.max_connections) {
    return refuse(id, peer, resource_exhausted("already {} connections", connections_.size()));
  }
  auto device = device_for(id->verbs);
  if (!device.ok()) return refuse(id, peer, device.status());
  auto c = std::make_unique<Connection>();
  c->id = id;
  c->peer = peer;
  c->slot_count = config_.slots_per_connection;
  c->grants.resize(c->slot_count);
  c->accepted_at = std::chrono::steady_clock::now();
  c->client_hello = hello->hello;
  c->server_hello = *mine;
  c->seal = std::move(trust::seals_for(*keys, trust::Role::kServer).incoming);
  const uint32_t depth = kReceivesPerSlot * c->slot_count;
  const auto set_up = [&]() -> Status {
    Device& d = **device;
    c->pd = ibv_alloc_pd(id->verbs);
    if (c->pd == nullptr) return io_error("ibv_alloc_pd: {}", std::strerror(errno));
    c->receives = AlignedBuffer(static_cast<size_t>(depth) * kOfferBytes);
    DC_ASSIGN_OR_RETURN(c->receive_registration,
                        verbs::register_host(c->pd, c->receives.data(), c->receives.size(), verbs::kLocalWrite));
    c->replies = AlignedBuffer(static_cast<size_t>(depth) * kReplyBytes);
    DC_ASSIGN_OR_RETURN(c->reply_registration,
                        verbs::register_host(c->pd, c->replies.data(), c->replies.size(), verbs::kLocalWrite));
    DC_RETURN_IF_ERROR(c->queues.create(id, c->pd, depth, config_.timeouts, d.completions, c.get()));
    verbs::QueuePair& qp = *c->queues.queue_pair;
    DC_RETURN_IF_ERROR(qp.to_init());
    for (uint32_t i = 0; i < depth; ++i) {
      DC_RETURN_IF_ERROR(qp.post_recv(
          i, {c->receives.data() + static_cast<size_t>(i) * kOfferBytes, static_cast<uint32_t>(kOfferBytes),
              c->receive_registration.lkey()}));
    }
    DC_RETURN_IF_ERROR(qp.to_ready_to_receive());
    DC_RETURN_IF_ERROR(qp.to_ready_to_send());
    uint8_t reply[kAcceptBytes];
    encode_accept(AcceptData{c->slot_count, config_.max_slice_bytes, c->server_hello,
                             trust::prove(options_.trust.secret, trust::Role::kServer, c->client_hello,
                                          c->server_hello)},
                  reply);
    rdma_conn_param param{};
    param.private_data = reply;
    param.private_data_len = sizeof(reply);
    param.qp_num = c->queues.qp->qp_num;
    param.rnr_retry_count = config_.timeouts.rnr_retry;
    if (rdma_accept(id, &param) != 0) return unavailable("rdma_accept: {}", std::strerror(errno));
    return Status();
  };
  if (Status s = set_up(); !s.ok()) {
    c.reset();  // its verbs objects go before the id they were made for
    return refuse(id, peer, s);
  }
  log().debug("rdma: accepted {} (queue pair {}), {} offers in flight", peer, c->queues.qp->qp_num, c->slot_count);
  by_id_[id] = c.get();
  Connection* raw = c.get();
  connections_[raw] = std::move(c);
}

bool RdmaListener::serve_some(Connection* c) {
  if (connections_.find(c) == connections_.end()) return false;  // dropped earlier in this turn
  ibv_wc wc[4];
  auto n = poll_completions(c->queues.cq, wc, 4);
  if (!n.ok()) {
    drop(c, n.status());
    return false;
  }
  Status failed;
  for (int i = 0; i < *n && failed.ok(); ++i) {
    if (wc[i].status != IBV_WC_SUCCESS) {
      failed = unavailable("work completion failed: {}", ibv_wc_status_str(wc[i].status));
      continue;
    }
    if (wc[i].opcode != IBV_WC_RECV && wc[i].opcode != IBV_WC_RECV_RDMA_WITH_IMM) continue;  // a reply left
    uint8_t* buffer = c->receives.data() + wc[i].wr_id * kOfferBytes;
    try {  // libcrypto failing drops this connection; it must not end the thread
      failed = wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM ? serve_write(*c, ntohl(wc[i].imm_data), wc[i].byte_len)
               : c->proven                                ? serve_offer(*c, buffer, wc[i].byte_len)
                                                          : serve_proof(*c, buffer, wc[i].byte_len);
    } catch (const std::exception& e) {
      failed = internal_error("{}", e.what());
    }
    if (failed.ok()) {
      failed = c->queues.queue_pair->post_recv(
          wc[i].wr_id, {buffer, static_cast<uint32_t>(kOfferBytes), c->receive_registration.lkey()});
    }
  }
  if (!failed.ok()) drop(c, failed);
  return *n > 0;
}

Status RdmaListener::serve_proof(Connection& c, const uint8_t* message, uint32_t length) {
  DC_ASSIGN_OR_RETURN(trust::Proof proof, decode_proof(message, length));
  DC_RETURN_IF_ERROR(
      trust::check_proof(options_.trust.secret, trust::Role::kClient, c.client_hello, c.server_hello, proof.data()));
  c.proven = true;
  return Status();
}

Status RdmaListener::serve_offer(Connection& c, const uint8_t* message, uint32_t length) {
  DC_ASSIGN_OR_RETURN(Offer offer, decode_offer(message, length, c.slot_count, config_.max_slice_bytes));
  const uint64_t number = c.offers_taken++;  // counted whatever comes of it: the sender counts every offer
  Grant& grant = c.grants[verbs::SlotTable::slot_of(offer.imm)];
  if (grant.open) {
    return corrupt("offer in slot {} while its grant for slice {} is open", verbs::SlotTable::slot_of(offer.imm),
                   grant.slice.index);
  }
  // A newer copy that supersedes this one (its path stalled) marks it; the serving thread then
  // drops the connection, as over TCP, which revokes the grant before the slice is let go.
  auto superseded = std::make_shared<std::atomic<bool>>(false);
  DC_ASSIGN_OR_RETURN(Landing landing, sink_->begin(offer.slice, [this, superseded] {
                        superseded->store(true);
                        superseded_ = true;
                        const uint64_t one = 1;
                        (void)!write(wake_fd_, &one, sizeof(one));
                      }));
  if (landing.bytes == nullptr) {  // a duplicate: nothing to write
    const bool accepted = sink_->complete(offer.slice, landing, false);
    return reply(c, Reply{offer.imm, accepted ? ReplyKind::kInPlace : ReplyKind::kRejected});
  }
  auto window = verbs::register_host(c.pd, landing.bytes, offer.slice.length, verbs::kRemoteWrite);
  if (!window.ok()) {
    sink_->complete(offer.slice, landing, false);
    return window.status().with_context(fmt::format("lending slice {}'s place", offer.slice.index));
  }
  grant = Grant{true, offer.imm, number, {}, offer.slice, std::move(landing), std::move(*window), std::move(superseded)};
  std::memcpy(grant.offer.data(), message, kOfferBytes);
  return reply(c, Reply{offer.imm, ReplyKind::kGranted, reinterpret_cast<uint64_t>(grant.landing.bytes),
                        grant.window.rkey()});
}

Status RdmaListener::serve_write(Connection& c, uint32_t imm, uint32_t length) {
  const uint32_t slot = verbs::SlotTable::slot_of(imm);
  if (slot >= c.slot_count) return corrupt("write names slot {}, the connection has {}", slot, c.slot_count);
  Grant& grant = c.grants[slot];
  if (!grant.open || grant.imm != imm) return corrupt("a write with immediate {:#x} that no open grant allowed", imm);
  const SliceRef slice = grant.slice;
  const Landing landing = close_grant(grant);  // before anything else
  if (length != slice.length) {
    sink_->complete(slice, landing, false);
    return corrupt("a write of {} bytes for slice {}, which has {}", length, slice.index, slice.length);
  }
  // The tag first: the bytes landed where only this grant let them, and its window is closed.
  if (c.seal->mode() != trust::Protection::kInsecure &&
      !c.seal->check_numbered(grant.number, grant.offer.data(), kOfferTaggedBytes, landing.bytes, slice.length,
                              grant.offer.data() + kOfferTaggedBytes)) {
    sink_->complete(slice, landing, false);
    return corrupt("slice {} of transfer {} failed its authentication tag (altered on the way, or not from this "
                   "session)", slice.index, slice.transfer);
  }
  const bool verified = checksum_matches(slice, landing.bytes);
  const bool accepted = sink_->complete(slice, landing, verified);
  if (accepted) {
    ++c.slices_in_place;
    c.bytes_in_place += slice.length;
  }
  return reply(c, Reply{imm, accepted ? ReplyKind::kInPlace : ReplyKind::kRejected});
}

Status RdmaListener::reply(Connection& c, const Reply& answer) {
  // Two buffers per slot: a grant may still be on its way out when the final answer is written.
  const size_t index = static_cast<size_t>(verbs::SlotTable::slot_of(answer.imm)) * kReceivesPerSlot +
                       (answer.kind == ReplyKind::kGranted ? 0 : 1);
  uint8_t* out = c.replies.data() + index * kReplyBytes;
  encode_reply(answer, out);
  return c.queues.queue_pair->send(index, {out, static_cast<uint32_t>(kReplyBytes), c.reply_registration.lkey()});
}

void RdmaListener::drop_unproven() {
  // A peer that connects and never proves the secret would otherwise hold a connection (and a
  // place under max_connections) for good, with no secret needed to open it.
  const auto now = std::chrono::steady_clock::now();
  std::vector<Connection*> late;
  for (auto& [raw, owned] : connections_) {
    if (!owned->proven && now - owned->accepted_at > options_.handshake_timeout) late.push_back(raw);
  }
  for (Connection* c : late) {
    drop(c, permission_denied("handshake: no proof of the secret within {} ms", options_.handshake_timeout.count()));
  }
}

void RdmaListener::drop_superseded() {
  if (!superseded_.exchange(false)) return;
  std::vector<std::pair<Connection*, uint32_t>> stalled;
  for (auto& [raw, owned] : connections_) {
    for (const Grant& g : owned->grants) {
      if (g.open && g.superseded->load()) {
        stalled.emplace_back(raw, g.slice.index);
        break;
      }
    }
  }
  for (auto [c, index] : stalled) {
    drop(c, unavailable("stalled in slice {}, which a newer copy on another connection superseded", index));
  }
}

void RdmaListener::drop(Connection* c, const Status& why) {
  auto it = connections_.find(c);
  if (it == connections_.end()) return;
  std::unique_ptr<Connection> owned = std::move(it->second);
  connections_.erase(it);
  by_id_.erase(c->id);
  if (!closed_) note_drop(c->peer, why);
  log().debug("rdma: connection from {}: {} slices, {} bytes written straight into staging", c->peer,
              c->slices_in_place, c->bytes_in_place);
  if (c->queues.queue_pair) c->queues.queue_pair->to_error();
  // Open grants: revoked, then their slices let go (back to missing, for another copy).
  for (Grant& g : c->grants) {
    if (g.open) sink_->complete(g.slice, close_grant(g), false);
  }
  rdma_disconnect(c->id);
  rdma_cm_id* id = c->id;
  owned.reset();  // queue pair, registrations and protection domain first, then the id
  rdma_destroy_id(id);
}

}  // namespace deltacast::rdma
