#include "broadcast/transport/rdma/channel.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "broadcast/transport/rdma/verbs/device_events.h"
#include "core/log.h"

namespace deltacast::rdma {

namespace {

constexpr int kPollMs = 50;

}  // namespace

// A registration of the memory one transfer's slices are read from (data - offset: the
// transfer's base), made on its first slice and kept while the connection lives or until a
// later transfer needs room and nothing in flight reads it.
struct SourceMemory {
  uint64_t transfer = 0;
  const uint8_t* base = nullptr;
  verbs::Registration registration;
};

struct RdmaChannel::Connection {
  std::unique_ptr<Dialed> link;
  AlignedBuffer offers;  // one offer message per slot
  verbs::Registration offer_registration;
  std::vector<SourceMemory> sources;
  std::unique_ptr<verbs::SlotTable> table;
  int subscription = 0;

  ~Connection() {
    if (subscription != 0) verbs::device_events().unsubscribe(subscription);
    // Before the protection domain goes with the link.
    sources.clear();
    offer_registration = verbs::Registration();
  }
};

RdmaChannel::RdmaChannel(RailSpec rail, ChannelOptions options, RdmaConfig config)
    : rail_(std::move(rail)),
      options_(std::move(options)),
      config_(config),
      silence_limit_(std::max<Millis>(Millis(500), 10 * options_.heartbeat)) {
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

void RdmaChannel::finish(Record record, Status result) {
  if (record.done) record.done(std::move(result));
}

Status RdmaChannel::connect_once() {
  auto c = std::make_unique<Connection>();
  // The handshake takes several round trips through the receiver's kernel and its serving
  // thread: more than a TCP connect, hence a floor.
  const Millis connect_timeout = std::max(options_.connect_timeout, Millis(3000));
  DC_ASSIGN_OR_RETURN(c->link, dial(rail_, options_.rail_index, options_.trust, config_.slots_per_connection,
                                    config_.timeouts, connect_timeout));
  Dialed& link = *c->link;
  const uint32_t slots = std::min(link.remote.slot_count, config_.slots_per_connection);
  c->table = std::make_unique<verbs::SlotTable>(slots);
  c->offers = AlignedBuffer(static_cast<size_t>(slots) * kOfferBytes);
  DC_ASSIGN_OR_RETURN(c->offer_registration,
                      verbs::register_host(link.pd, c->offers.data(), c->offers.size(), verbs::kLocalWrite));
  const std::string device = ibv_get_device_name(link.id->verbs->device);
  if (Status watched = verbs::watch_device(device); !watched.ok()) {
    log().warn("rdma: {}: port events unavailable ({}); failures surface as failed completions only",
               rail_.to_string(), watched.to_string());
  }
  c->subscription = verbs::device_events().subscribe(device, link.id->port_num, [this](verbs::PortSignal s) {
    port_down_ = s != verbs::PortSignal::kPortUp;
    wake();
  });
  port_down_ = false;
  log().debug("rdma: {} connected on {} port {} (queue pair {}), {} offers in flight, slices up to {} bytes",
              rail_.to_string(), device, link.id->port_num, link.queues.qp->qp_num, slots, link.remote.max_slice_bytes);
  agreed_ = static_cast<int>(link.seal->mode());
  connection_ = std::move(c);
  connected_ = true;
  return Status();
}

void RdmaChannel::teardown(const Status& why) {
  connected_ = false;
  if (connection_ != nullptr) {
    log().debug("rdma: {}: connection closed with {} slices out: {}", rail_.to_string(), inflight_.size(),
                why.to_string());
  }
  // What was out fails at once and its slices can go elsewhere now; the queue pair stops first,
  // so that the NIC no longer reads the callers' memory once they are told.
  if (connection_ != nullptr && connection_->link->queues.queue_pair) connection_->link->queues.queue_pair->to_error();
  std::map<uint64_t, Record> failed;
  failed.swap(inflight_);
  for (auto& [id, record] : failed) finish(std::move(record), why);
  if (connection_ != nullptr) retire(std::move(connection_));
}

void RdmaChannel::retire(std::unique_ptr<Connection> connection) {
  // Port events no longer concern this connection (nor may reach this channel once it is gone).
  if (connection->subscription != 0) {
    verbs::device_events().unsubscribe(connection->subscription);
    connection->subscription = 0;
  }
  reap_retired(false);
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread thread([connection = std::move(connection), done, rail = rail_.to_string()]() mutable {
    const auto start = Clock::now();
    Dialed& link = *connection->link;
    if (link.queues.queue_pair) link.queues.queue_pair->to_error();
    rdma_disconnect(link.id);
    connection.reset();
    const auto took = std::chrono::duration_cast<Millis>(Clock::now() - start);
    if (took > Millis(100)) log().debug("rdma: {}: disconnecting took {} ms", rail, took.count());
    *done = true;
  });
  retired_.push_back(Retired{std::move(thread), std::move(done)});
}

void RdmaChannel::reap_retired(bool all) {
  for (auto it = retired_.begin(); it != retired_.end();) {
    if (all || *it->done) {
      it->thread.join();
      it = retired_.erase(it);
    } else {
      ++it;
    }
  }
}

Result<uint32_t> RdmaChannel::source_key(const Record& record) {
  Connection& c = *connection_;
  const uint8_t* base = record.data - record.slice.offset();
  for (const SourceMemory& m : c.sources) {
    if (m.transfer == record.slice.transfer && m.base == base) return m.registration.lkey();
  }
  std::erase_if(c.sources, [&](const SourceMemory& m) {
    return std::none_of(inflight_.begin(), inflight_.end(),
                        [&](const auto& entry) { return entry.second.slice.transfer == m.transfer; });
  });
  // Read only: the NIC reads the slices from here, nobody writes.
  DC_ASSIGN_OR_RETURN(verbs::Registration registration,
                      verbs::register_host(c.link->pd, const_cast<uint8_t*>(base), record.slice.transfer_bytes, 0));
  const uint32_t key = registration.lkey();
  c.sources.push_back(SourceMemory{record.slice.transfer, base, std::move(registration)});
  return key;
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
    if (record.slice.length > c.link->remote.max_slice_bytes) {
      finish(std::move(record), invalid_argument("{}: a slice of {} bytes exceeds the receiver's limit of {}",
                                                 rail_.to_string(), record.slice.length,
                                                 c.link->remote.max_slice_bytes));
      continue;
    }
    if (auto key = source_key(record); !key.ok()) {
      finish(std::move(record), key.status().with_context(fmt::format("{}: registering transfer {}'s memory",
                                                                      rail_.to_string(), record.slice.transfer)));
      continue;
    }
    if (inflight_.empty()) last_heard_ = Clock::now();  // the silence clock starts with the first slice out
    ensure_checksum(record.slice, record.data);
    const uint64_t id = next_record_++;
    const uint32_t imm = *c.table->acquire(id);
    const uint32_t slot = verbs::SlotTable::slot_of(imm);
    uint8_t* offer = c.offers.data() + static_cast<size_t>(slot) * kOfferBytes;
    encode_offer(record.slice, imm, offer);
    c.link->tag_offer(offer, record.data, record.slice.length);
    inflight_.emplace(id, std::move(record));
    const Status posted = c.link->queues.queue_pair->send(
        kOfferSendTag | slot, {offer, static_cast<uint32_t>(kOfferBytes), c.offer_registration.lkey()});
    if (!posted.ok()) {
      teardown(posted.with_context(rail_.to_string()));
      return;
    }
  }
}

Status RdmaChannel::on_reply(const Reply& reply) {
  Connection& c = *connection_;
  const auto record_id = c.table->find(reply.imm);
  if (!record_id) return Status();  // stale or forged: it concerns nothing in flight
  auto it = inflight_.find(*record_id);
  if (it == inflight_.end()) return Status();
  Record& record = it->second;
  if (reply.kind == ReplyKind::kGranted) {
    if (record.written) return corrupt("{}: a second grant for slice {}", rail_.to_string(), record.slice.index);
    DC_ASSIGN_OR_RETURN(uint32_t key, source_key(record));
    record.written = true;
    // Straight from the caller's memory to the granted place: the record id rides as wr_id.
    return c.link->queues.queue_pair->write_with_imm(*record_id,
                                                     {const_cast<uint8_t*>(record.data), record.slice.length, key},
                                                     {reply.address, reply.rkey}, reply.imm);
  }
  (void)c.table->release(reply.imm);
  Record done = std::move(record);
  inflight_.erase(it);
  Status result = reply.kind == ReplyKind::kInPlace
                      ? Status()
                      : corrupt("{}: receiver rejected slice {} of transfer {}", rail_.to_string(), done.slice.index,
                                done.slice.transfer);
  finish(std::move(done), std::move(result));
  return Status();
}

Status RdmaChannel::drain_completions() {
  Dialed& c = *connection_->link;
  rearm_completions(c.queues.completion_channel);
  ibv_wc wc[16];
  for (;;) {
    DC_ASSIGN_OR_RETURN(int n, poll_completions(c.queues.cq, wc, 16));
    if (n == 0) return Status();
    last_heard_ = Clock::now();
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        return unavailable("{}: work completion failed: {}", rail_.to_string(), ibv_wc_status_str(wc[i].status));
      }
      if ((wc[i].wr_id & kReplyReceiveTag) == 0) continue;  // an offer or a write left: replies complete them
      const uint32_t index = static_cast<uint32_t>(wc[i].wr_id & 0xffffffffu);
      uint8_t* buffer = c.replies.data() + index * kReplyBytes;
      DC_ASSIGN_OR_RETURN(Reply reply, decode_reply(buffer, wc[i].byte_len));
      DC_RETURN_IF_ERROR(c.queues.queue_pair->post_recv(
          wc[i].wr_id, {buffer, static_cast<uint32_t>(kReplyBytes), c.reply_registration.lkey()}));
      DC_RETURN_IF_ERROR(on_reply(reply));
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
          // A refusal over the secret or the mode is worth telling; a receiver not there yet is not.
          if (s.code() == StatusCode::kPermissionDenied) {
            log().warn("rdma: {}: connect refused: {}", rail_.to_string(), s.to_string());
          } else {
            log().debug("rdma: {}: connect failed: {}", rail_.to_string(), s.to_string());
          }
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
      // Slices out and nothing back, not even the completion of a write: the path died silently
      // (or the receiver's acknowledgements no longer get through, which no queue-pair timeout
      // on this side sees once the writes themselves completed).
      if (connection_ != nullptr && !inflight_.empty() && Clock::now() - last_heard_ > silence_limit_) {
        teardown(unavailable("{}: nothing heard for {} ms with {} slices out", rail_.to_string(),
                             silence_limit_.count(), inflight_.size()));
      }
      if (connection_ != nullptr) {
        // The peer went away: the connection manager says so.
        rdma_cm_event* event = nullptr;
        if (rdma_get_cm_event(connection_->link->events, &event) == 0) {
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
      fds[1].fd = connection_->link->queues.completion_channel->fd;
      fds[2].fd = connection_->link->events->fd;
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
  reap_retired(true);
}

}  // namespace deltacast::rdma
