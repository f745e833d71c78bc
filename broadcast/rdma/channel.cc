#include "broadcast/rdma/channel.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include "broadcast/verbs/device_events.h"
#include "core/log.h"

namespace deltacast::rdma {

namespace {

constexpr uint64_t kRecvTag = 1ull << 32;  // wr_id of an acknowledgement receive; writes use the slot index
constexpr int kPollMs = 50;

std::string printable(const void* data, size_t length) {
  std::string out;
  const auto* p = static_cast<const char*>(data);
  for (size_t i = 0; p != nullptr && i < length && p[i] != 0; ++i) out += std::isprint(p[i]) ? p[i] : '?';
  return out;
}

}  // namespace

struct RdmaChannel::Connection {
  rdma_event_channel* events = nullptr;
  rdma_cm_id* id = nullptr;
  ibv_pd* pd = nullptr;
  QueueResources queues;
  AlignedBuffer send_slots;
  verbs::Registration send_registration;
  AlignedBuffer acks;
  verbs::Registration ack_registration;
  AcceptData remote;
  uint32_t slot_bytes = 0;
  std::unique_ptr<verbs::SlotTable> table;
  int subscription = 0;

  ~Connection() {
    if (subscription != 0) verbs::device_events().unsubscribe(subscription);
    send_registration = verbs::Registration();
    ack_registration = verbs::Registration();
    queues.destroy();
    if (pd != nullptr) ibv_dealloc_pd(pd);
    if (id != nullptr) rdma_destroy_id(id);
    if (events != nullptr) rdma_destroy_event_channel(events);
  }
};

RdmaChannel::RdmaChannel(RailSpec rail, ChannelOptions options, RdmaConfig config)
    : rail_(std::move(rail)), options_(std::move(options)), config_(config) {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  thread_ = std::thread([this] { run(); });
}

RdmaChannel::~RdmaChannel() {
  close();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void RdmaChannel::wake() {
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

void RdmaChannel::send(const SliceRef& slice, const uint8_t* data, SliceDone done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!finished_) {
      queue_.push_back(Record{slice, data, std::move(done)});
      wake();  // the connection thread (or close()) completes it
      return;
    }
  }
  // Closed for good: nothing will take the record, and send() itself must not call `done`.
  std::thread([done = std::move(done), why = unavailable("{}: channel closed", rail_.to_string())] { done(why); })
      .detach();
}

void RdmaChannel::reset() {
  reset_requested_ = true;
  wake();
}

void RdmaChannel::close() {
  if (closed_.exchange(true)) {
    if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
    return;
  }
  wake();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
  std::deque<Record> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(queue_);
    finished_ = true;
  }
  for (auto& r : left) finish(std::move(r), unavailable("{}: channel closed", rail_.to_string()));
}

bool RdmaChannel::wait_ready(Millis timeout) const {
  const auto deadline = Clock::now() + timeout;
  while (!ready()) {
    if (Clock::now() >= deadline || closed_) return false;
    std::this_thread::sleep_for(Millis(5));
  }
  return true;
}

void RdmaChannel::finish(Record record, Status result) {
  if (record.done) record.done(std::move(result));
}

Status RdmaChannel::connect_once() {
  auto c = std::make_unique<Connection>();
  c->events = rdma_create_event_channel();
  if (c->events == nullptr) return io_error("rdma_create_event_channel: {}", std::strerror(errno));
  fcntl(c->events->fd, F_SETFL, fcntl(c->events->fd, F_GETFL) | O_NONBLOCK);
  if (rdma_create_id(c->events, &c->id, this, RDMA_PS_TCP) != 0) return io_error("rdma_create_id: {}", std::strerror(errno));
  sockaddr_in local{}, remote{};
  DC_RETURN_IF_ERROR(to_sockaddr(Endpoint{rail_.local.host, 0}, &local));
  DC_RETURN_IF_ERROR(to_sockaddr(rail_.remote, &remote));
  // The handshake takes several round trips through the receiver's kernel and its serving
  // thread: more than a TCP connect, hence a floor.
  const Millis connect_timeout = std::max(options_.connect_timeout, Millis(3000));
  const auto deadline = Clock::now() + connect_timeout;
  const int timeout_ms = static_cast<int>(connect_timeout.count());
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
  const uint32_t depth = config_.slots_per_connection;
  DC_RETURN_IF_ERROR(c->queues.create(c->id, c->pd, depth, config_.timeouts, nullptr, this));
  DC_RETURN_IF_ERROR(c->queues.queue_pair->to_init());
  c->acks = AlignedBuffer(depth * kAckBytes);
  DC_ASSIGN_OR_RETURN(c->ack_registration, verbs::register_host(c->pd, c->acks.data(), c->acks.size(), verbs::kLocalWrite));
  for (uint32_t i = 0; i < depth; ++i) {
    DC_RETURN_IF_ERROR(c->queues.queue_pair->post_recv(
        kRecvTag | i, {c->acks.data() + i * kAckBytes, static_cast<uint32_t>(kAckBytes), c->ack_registration.lkey()}));
  }

  uint8_t hello[kConnectBytes];
  encode_connect(ConnectData{options_.token, options_.rail_index}, hello);
  rdma_conn_param param{};
  param.private_data = hello;
  param.private_data_len = sizeof(hello);
  param.qp_num = c->queues.qp->qp_num;
  param.retry_count = config_.timeouts.retry_count;
  param.rnr_retry_count = config_.timeouts.rnr_retry;
  if (rdma_connect(c->id, &param) != 0) return unavailable("rdma_connect: {}", std::strerror(errno));
  log().debug("rdma: {}: connect request sent (queue pair {})", rail_.to_string(), c->queues.qp->qp_num);
  // The queue pair is ours (not rdma_cm's), so the response comes to us to finish the handshake.
  DC_ASSIGN_OR_RETURN(rdma_cm_event * response, expect(RDMA_CM_EVENT_CONNECT_RESPONSE, "connecting"));
  auto accepted = decode_accept(static_cast<const uint8_t*>(response->param.conn.private_data),
                                response->param.conn.private_data_len);
  rdma_ack_cm_event(response);
  if (!accepted.ok()) {
    rdma_reject(c->id, nullptr, 0);
    return accepted.status();
  }
  c->remote = *accepted;
  c->slot_bytes = c->remote.slot_bytes;
  DC_RETURN_IF_ERROR(c->queues.queue_pair->to_ready_to_receive());
  DC_RETURN_IF_ERROR(c->queues.queue_pair->to_ready_to_send());
  if (rdma_establish(c->id) != 0) return unavailable("rdma_establish: {}", std::strerror(errno));

  const uint32_t slots = std::min(c->remote.slot_count, depth);
  c->table = std::make_unique<verbs::SlotTable>(slots);
  c->send_slots = AlignedBuffer(static_cast<size_t>(slots) * c->slot_bytes);
  DC_ASSIGN_OR_RETURN(c->send_registration, verbs::register_host(c->pd, c->send_slots.data(), c->send_slots.size(),
                                                                 verbs::kLocalWrite));
  const std::string device = ibv_get_device_name(c->id->verbs->device);
  if (Status watched = verbs::watch_device(device); !watched.ok()) {
    log().warn("rdma: {}: port events unavailable ({}); failures surface as failed completions only",
               rail_.to_string(), watched.to_string());
  }
  c->subscription = verbs::device_events().subscribe(device, c->id->port_num, [this](verbs::PortSignal s) {
    port_down_ = s != verbs::PortSignal::kPortUp;
    wake();
  });
  port_down_ = false;
  max_slice_bytes_ = c->slot_bytes - static_cast<uint32_t>(kSlotHeaderBytes);
  connection_ = std::move(c);
  connected_ = true;
  log().debug("rdma: {} connected on {} port {} (queue pair {}), {} slots of {} bytes", rail_.to_string(), device,
              connection_->id->port_num, connection_->queues.qp->qp_num, slots, connection_->slot_bytes);
  return Status();
}

void RdmaChannel::teardown(const Status& why) {
  connected_ = false;
  if (connection_ != nullptr) {
    if (connection_->queues.queue_pair) connection_->queues.queue_pair->to_error();
    rdma_disconnect(connection_->id);
    connection_.reset();
  }
  std::map<uint64_t, Record> failed;
  failed.swap(inflight_);
  for (auto& [id, record] : failed) finish(std::move(record), why);
}

void RdmaChannel::pump() {
  Connection& c = *connection_;
  for (;;) {
    if (c.table->full()) return;
    Record record;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.empty()) return;
      record = std::move(queue_.front());
      queue_.pop_front();
    }
    const uint32_t capacity = c.slot_bytes - static_cast<uint32_t>(kSlotHeaderBytes);
    if (record.slice.length > capacity) {
      finish(std::move(record), invalid_argument("{}: a slice of {} bytes exceeds the receiver's RDMA slot of {}",
                                                 rail_.to_string(), record.slice.length, capacity));
      continue;
    }
    const uint64_t id = next_record_++;
    const uint32_t imm = *c.table->acquire(id);
    const uint32_t slot = verbs::SlotTable::slot_of(imm);
    uint8_t* local = c.send_slots.data() + static_cast<size_t>(slot) * c.slot_bytes;
    encode_slot_header(record.slice, imm, local);
    std::memcpy(local + kSlotHeaderBytes, record.data, record.slice.length);
    const SliceRef slice = record.slice;
    inflight_.emplace(id, std::move(record));
    const Status posted = c.queues.queue_pair->write_with_imm(
        slot, {local, static_cast<uint32_t>(kSlotHeaderBytes + slice.length), c.send_registration.lkey()},
        {c.remote.slots_address + static_cast<uint64_t>(slot) * c.slot_bytes, c.remote.rkey}, imm);
    if (!posted.ok()) {
      teardown(posted.with_context(rail_.to_string()));
      return;
    }
  }
}

Status RdmaChannel::drain_completions() {
  Connection& c = *connection_;
  ibv_cq* cq = nullptr;
  void* context = nullptr;
  if (ibv_get_cq_event(c.queues.completion_channel, &cq, &context) == 0) {
    ibv_ack_cq_events(cq, 1);
    ibv_req_notify_cq(cq, 0);
  }
  ibv_wc wc[16];
  for (;;) {
    DC_ASSIGN_OR_RETURN(int n, poll_completions(c.queues.cq, wc, 16));
    if (n == 0) return Status();
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        return unavailable("{}: work completion failed: {}", rail_.to_string(), ibv_wc_status_str(wc[i].status));
      }
      if ((wc[i].wr_id & kRecvTag) == 0) continue;  // a write left: its acknowledgement completes it
      const uint32_t index = static_cast<uint32_t>(wc[i].wr_id & 0xffffffffu);
      uint8_t* buffer = c.acks.data() + index * kAckBytes;
      DC_ASSIGN_OR_RETURN(Ack ack, decode_ack(buffer, wc[i].byte_len));
      DC_RETURN_IF_ERROR(c.queues.queue_pair->post_recv(
          wc[i].wr_id, {buffer, static_cast<uint32_t>(kAckBytes), c.ack_registration.lkey()}));
      const auto record_id = c.table->release(ack.imm);
      if (!record_id) continue;  // stale or forged: it completes nothing
      auto it = inflight_.find(*record_id);
      if (it == inflight_.end()) continue;
      Record record = std::move(it->second);
      inflight_.erase(it);
      Status result = ack.accepted ? Status()
                                   : corrupt("{}: receiver rejected slice {} of transfer {}", rail_.to_string(),
                                             record.slice.index, record.slice.transfer);
      finish(std::move(record), std::move(result));
    }
  }
}

void RdmaChannel::run() {
  Millis backoff(50);
  Clock::time_point next_attempt{};
  while (!closed_) {
    if (connection_ == nullptr) {
      if (reset_requested_.exchange(false)) {  // what waits for this rail goes elsewhere now
        backoff = Millis(50);
        std::deque<Record> waiting;
        {
          std::lock_guard<std::mutex> lock(mu_);
          waiting.swap(queue_);
        }
        for (auto& r : waiting) finish(std::move(r), unavailable("{}: not connected", rail_.to_string()));
      }
      if (Clock::now() >= next_attempt) {
        Status s = connect_once();
        if (!s.ok()) {
          log().debug("rdma: {}: connect failed: {}", rail_.to_string(), s.to_string());
          next_attempt = Clock::now() + backoff;
          backoff = std::min(backoff * 2, Millis(1000));
        } else {
          backoff = Millis(50);
        }
      }
    } else if (reset_requested_.exchange(false)) {
      teardown(unavailable("{}: connection reset", rail_.to_string()));
    } else if (port_down_) {
      teardown(unavailable("{}: port went down", rail_.to_string()));
      next_attempt = Clock::now() + Millis(200);
    }
    if (connection_ != nullptr) {
      pump();
      if (connection_ != nullptr) {
        if (Status s = drain_completions(); !s.ok()) {
          log().warn("rdma: {}", s.to_string());
          teardown(s);
        }
      }
      if (connection_ != nullptr) {
        // The peer went away: the connection manager says so.
        rdma_cm_event* event = nullptr;
        if (rdma_get_cm_event(connection_->events, &event) == 0) {
          const rdma_cm_event_type type = event->event;
          rdma_ack_cm_event(event);
          if (type == RDMA_CM_EVENT_DISCONNECTED || type == RDMA_CM_EVENT_DEVICE_REMOVAL) {
            teardown(unavailable("{}: {}", rail_.to_string(), rdma_event_str(type)));
          }
        }
      }
    }
    pollfd fds[3] = {{wake_fd_, POLLIN, 0}, {-1, POLLIN, 0}, {-1, POLLIN, 0}};
    if (connection_ != nullptr) {
      fds[1].fd = connection_->queues.completion_channel->fd;
      fds[2].fd = connection_->events->fd;
    }
    const bool work_waiting = [&] {
      if (connection_ == nullptr || connection_->table->full()) return false;
      std::lock_guard<std::mutex> lock(mu_);
      return !queue_.empty();
    }();
    if (!work_waiting) poll(fds, 3, kPollMs);
    uint64_t drained = 0;
    (void)!read(wake_fd_, &drained, sizeof(drained));
  }
  teardown(unavailable("{}: channel closed", rail_.to_string()));
}

}  // namespace deltacast::rdma
