#include "broadcast/engine/consumer.h"

#include <sys/socket.h>
#include <unistd.h>

#include "broadcast/engine/metrics/engine_metrics.h"
#include "broadcast/engine/plan/planner.h"
#include "broadcast/engine/version_blob.h"
#include "broadcast/transport/rail_health.h"
#include "broadcast/transport/socket.h"
#include "broadcast/transport/transport_select.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/parallel_memory.h"
#include "sparse/remapped_apply.h"

#include <fmt/ranges.h>

namespace deltacast {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

// The version being received.
struct Consumer::Incoming {
  control::Announce announce;
  TransferShape shape;
  std::shared_ptr<AlignedBuffer> memory;
  Clock::time_point started;
  uint64_t epoch = 0;      // the producer that announced it
  bool processed = false;  // verified (or failed); staging may still be serving children
};

// A verified version waiting to be committed.
struct Consumer::Staged {
  uint64_t version = 0;
  uint64_t epoch = 0;  // the producer that sent it: its version numbers mean nothing to another
  std::shared_ptr<AlignedBuffer> memory;  // the chunks point into it
  bool image = false;                     // a full version: `memory` is the model image
  VersionChunks chunks;                   // a delta: its buckets, verified
  // A delta for tensors on a GPU: its buckets as they arrived, verified on the GPU at commit.
  std::vector<std::span<const uint8_t>> buckets;
};

Result<std::unique_ptr<Consumer>> Consumer::create(Manifest manifest, std::vector<TensorView> tensors,
                                                   ConsumerOptions options) {
  if (options.layout) {
    if (options.layout->logical_tensors() != manifest.size()) {
      return invalid_argument("the consumer's layout maps {} tensors of the producer, whose manifest has {}",
                              options.layout->logical_tensors(), manifest.size());
    }
    DC_ASSIGN_OR_RETURN(const Manifest local, Manifest::create(options.layout->local_specs()));
    DC_RETURN_IF_ERROR(local.check_views(tensors));
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (!tensors[i].device.is_cpu()) {
        return invalid_argument("tensor '{}': a resharded consumer writes host tensors", local[i].name);
      }
    }
  } else {
    DC_RETURN_IF_ERROR(manifest.check_views(tensors));
  }
  std::optional<int> gpu;  // a resharded consumer's tensors were checked to be host tensors above
  if (!options.layout) {
    DC_ASSIGN_OR_RETURN(gpu, cuda_device_of(manifest, tensors));
  }
  std::unique_ptr<DeviceApplier> device_applier;
  if (gpu) {
    DC_ASSIGN_OR_RETURN(device_applier, make_device_applier(manifest, *gpu, options.cuda_stream, options.threads));
  }
  if (options.rails.empty()) return invalid_argument("a consumer needs at least one data rail address");
  if (options.coordinators.empty()) return invalid_argument("a consumer needs the producer's address");
  DC_ASSIGN_OR_RETURN(std::shared_ptr<Transport> transport,
                      resolve_transport(options.transport, options.transport_backend,
                                        options.trust.protection == trust::Protection::kEncrypted));
  std::unique_ptr<Consumer> c(
      new Consumer(std::move(manifest), std::move(tensors), std::move(options), std::move(transport)));
  c->device_applier_ = std::move(device_applier);
  ListenOptions listen;
  listen.trust = c->options_.trust;
  listen.netns = c->options_.netns;
  DC_ASSIGN_OR_RETURN(c->listener_, c->transport_->listen(c->options_.rails, &c->staging_, listen));
  c->staging_.set_on_slice(
      [relay = &c->relay_](const SliceRef& s) { relay->on_slice(s.transfer, s.index, s.checksum, s.leaf_tags); });
  if (c->options_.metrics) {
    DC_ASSIGN_OR_RETURN(c->metrics_, MetricsExporter::start(*c->options_.metrics, [consumer = c.get()](MetricsSink& sink) {
      collect_consumer_metrics(sink, *consumer);
    }));
  }
  // The first version is a full one: the staging it lands in is mapped now, so that it costs
  // what any later full version costs.
  {
    auto staging = c->staging_pool_.acquire(c->image_.bytes());
    touch_pages(staging->data(), staging->size(), *c->hash_pool_);
  }
  return c;
}

Consumer::Consumer(Manifest manifest, std::vector<TensorView> tensors, ConsumerOptions options,
                   std::shared_ptr<Transport> transport)
    : manifest_(std::move(manifest)),
      tensors_(std::move(tensors)),
      options_(std::move(options)),
      transport_(std::move(transport)),
      applier_(manifest_, options_.threads),
      held_(options_.layout ? HeldRanges::of(*options_.layout) : HeldRanges()),
      hash_pool_(std::make_unique<ThreadPool>(options_.threads)),
      image_(manifest_),
      staging_([] {
        StagingOptions staging;
        staging.announce_wait = Millis(3000);  // slices may overtake their version's announcement
        return staging;
      }()),
      relay_([&] {
        RelayOptions r;
        r.transport = transport_;
        r.local_rails = options_.rails;
        r.channel.trust = options_.trust;
        r.channel.netns = options_.netns;
        r.spray = options_.spray;
        return r;
      }()),
      auto_commit_(options_.auto_commit) {}

Consumer::~Consumer() { close(); }

std::optional<Endpoint> Consumer::metrics_endpoint() const {
  if (!metrics_) return std::nullopt;
  return metrics_->endpoint();
}

void Consumer::fail_version(uint64_t version, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++state_.failures;
  }
  send(control::Failed{version, why});
}

void Consumer::close() {
  if (closing_.exchange(true)) return;
  metrics_.reset();  // no scrape reads this consumer once it starts closing
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (link_) link_->close();
    cv_.notify_all();
  }
  if (connector_.joinable()) connector_.join();
  if (worker_.joinable()) worker_.join();
  if (progress_.joinable()) progress_.join();
  std::unique_ptr<ControlLink> link;
  {
    std::lock_guard<std::mutex> lock(mu_);
    link = std::move(link_);
  }
  link.reset();
  relay_.end();
  if (listener_) listener_->close();
}

Status Consumer::start(Millis timeout, OnCommit on_commit) {
  on_commit_ = std::move(on_commit);
  connector_ = std::thread([this] { connect_loop(); });
  worker_ = std::thread([this] { worker_loop(); });
  progress_ = std::thread([this] { progress_loop(); });
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return state_.connected || state_.refused || closing_; });
  if (state_.refused) return state_.last_error;
  if (!state_.connected) {
    return unavailable("not joined within {} ms{}", timeout.count(),
                       state_.last_error.ok() ? "" : " (" + state_.last_error.message() + ")");
  }
  return Status();
}

ConsumerState Consumer::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

uint64_t Consumer::version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.version;
}

void Consumer::send(const control::Message& message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (link_ && link_->open()) (void)link_->send(message);
}

Status Consumer::join(int fd) {
  control::Join hello;
  {
    std::lock_guard<std::mutex> lock(mu_);
    hello.name = options_.name;
    hello.node = options_.node.empty() ? net::host_name() : options_.node;
    hello.site = options_.site;
    hello.transport = std::string(transport_->name());
    hello.manifest_hash = manifest_.hash();
    hello.manifest = manifest_.tensors();
    hello.version = state_.version;
    // The epoch of the producer whose version this is, not of the producer last joined: after
    // joining a new producer and losing it before its full sync arrived, this consumer still holds
    // the old producer's version, and the same number from the new one is other weights.
    hello.epoch = state_.held_epoch;
    hello.rails = listener_->endpoints();
    // A member of a sharded group commits a version only when every rank's part is here: the
    // rank's round is done with it once it staged its part.
    hello.defers_commit = options_.layout != nullptr;
    if (options_.layout) hello.held = std::vector<HeldRange>(held_.ranges().begin(), held_.ranges().end());
  }
  const auto deadline = Clock::now() + Millis(5000);
  auto session = net::shake_hands(fd, trust::Role::kClient, options_.trust, trust::Purpose::kControl, deadline, &closing_);
  if (!session.ok()) {
    if (session.status().code() != StatusCode::kPermissionDenied) return session.status();
    // A wrong secret or protection is final: asking again cannot change it.
    std::lock_guard<std::mutex> lock(mu_);
    state_.refused = true;
    state_.last_error = Status(session.status().code(), "the producer refused this consumer: " +
                                                            session.status().message());
    cv_.notify_all();
    return state_.last_error;
  }
  DC_RETURN_IF_ERROR(
      write_control_frame(fd, control::encode_text(hello), *session->seals.outgoing, deadline, &closing_));
  DC_ASSIGN_OR_RETURN(std::string text,
                      read_control_frame(fd, *session->seals.incoming, deadline, Millis(5000), &closing_));
  DC_ASSIGN_OR_RETURN(control::Message answer, control::decode_text(text));
  if (const auto* reject = std::get_if<control::Reject>(&answer)) {
    std::lock_guard<std::mutex> lock(mu_);
    state_.refused = true;
    state_.last_error = Status(reject->code, "the producer refused this consumer: " + reject->reason);
    cv_.notify_all();
    return state_.last_error;
  }
  const auto* welcome = std::get_if<control::Welcome>(&answer);
  if (welcome == nullptr) return corrupt("expected a welcome, got '{}'", control::type_name(answer));
  const uint32_t id = welcome->id;
  const uint64_t epoch = welcome->epoch;
  {
    // Before the link exists, so that whatever its first message sets off sees this instance's id.
    std::lock_guard<std::mutex> lock(mu_);
    state_.id = id;
    state_.protection = std::string(trust::protection_name(session->mode()));
    if (state_.held_epoch != epoch && state_.version != 0) {
      log().info("consumer {}: a new producer (epoch {:x}); version {} will be replaced by a full sync", options_.name,
                 epoch, state_.version);
    }
    if (state_.epoch != epoch) {
      // Versions staged from the producer before are not committed: the new one would take
      // their numbers for its own.
      ready_.clear();
    }
    state_.epoch = epoch;
  }
  auto link = std::make_unique<ControlLink>(
      fd, std::move(session).value(), options_.control, [this](const control::Message& m) { on_message(m); },
      [this](const Status& why) {
        std::lock_guard<std::mutex> lock(mu_);
        state_.connected = false;
        if (!closing_) {
          state_.last_error = unavailable("lost the producer: {}", why.message());
          log().warn("consumer {}: {}; keeping version {}", options_.name, state_.last_error.message(), state_.version);
        }
        cv_.notify_all();
      });
  std::lock_guard<std::mutex> lock(mu_);
  state_.connected = true;
  state_.last_error = Status();
  link_ = std::move(link);
  joined_once_ = true;
  ++joins_;
  cv_.notify_all();
  return Status();
}

void Consumer::connect_loop() {
  Millis backoff = options_.reconnect_min;
  size_t attempt = 0;
  for (;;) {
    std::unique_ptr<ControlLink> dead;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return closing_ || state_.refused || !link_ || !link_->open(); });
      if (closing_ || state_.refused) return;
      dead = std::move(link_);  // destroyed outside the lock and outside its own thread
    }
    if (dead) {
      dead.reset();
      abandon_incoming();
    }
    auto fd = net::open_socket(options_.netns);
    Status s = fd.status();
    Endpoint coordinator;
    if (fd.ok()) {
      coordinator = options_.coordinators[attempt++ % options_.coordinators.size()];
      s = net::connect_socket(*fd, Endpoint{"0.0.0.0", 0}, coordinator, Millis(1000));
      if (s.ok()) s = join(*fd);
      if (!s.ok()) ::close(*fd);
    }
    if (s.ok()) {
      backoff = options_.reconnect_min;
      continue;
    }
    log().info("consumer {}: no join through {}: {}", options_.name, coordinator.to_string(), s.message());
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (state_.refused) return;
      state_.last_error = s;
      cv_.notify_all();
      cv_.wait_for(lock, backoff, [&] { return closing_.load(); });
    }
    backoff = std::min(backoff * 2, options_.reconnect_max);
    if (options_.rediscover && attempt % options_.coordinators.size() == 0 && !closing_) {
      auto found = options_.rediscover();
      if (!found.empty() && found != options_.coordinators) {
        log().info("consumer {}: the producer is now at {}", options_.name, found.front().to_string());
        options_.coordinators = std::move(found);
        attempt = 0;
      }
    }
  }
}

void Consumer::abandon_incoming() {
  std::shared_ptr<Incoming> gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    gone = std::move(incoming_);
  }
  if (!gone) return;
  relay_.end();
  staging_.forget(gone->shape.id);
}

void Consumer::on_message(const control::Message& m) {
  std::visit(control::Overloaded{[&](const control::Announce& announce) { on_version(announce); },
                                 [&](const control::Replan& replan) { on_replan(replan); },
                                 [&](const control::Done& done) { on_done(done); },
                                 [&](const control::Check& check) { on_check(check); },
                                 [&](const auto&) {
                                   // The coordinator never sends this: the connection is not to be
                                   // trusted, and is redialled.
                                   log().error("consumer {}: the producer sent '{}', which it never sends; reconnecting",
                                               options_.name, control::type_name(m));
                                   std::lock_guard<std::mutex> lock(mu_);
                                   if (link_) link_->close();
                                 }},
             m);
}

void Consumer::on_version(const control::Announce& m) {
  auto inc = std::make_shared<Incoming>();
  inc->announce = m;
  inc->shape = TransferShape{m.transfer, m.bytes, m.slice_bytes};
  inc->started = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    inc->epoch = state_.epoch;
  }
  // A version can never be much larger than the dense model (a full sync plus headers).
  const uint64_t limit = 2 * manifest_.total_bytes() + (64u << 20);
  Status s;
  if (m.bytes > limit || m.slice_bytes < 1024 || m.slice_bytes > (64u << 20) ||
      m.forwarding.stripes() > std::max<uint32_t>(1, inc->shape.slices())) {
    s = corrupt("version {}: {} bytes in {}-byte slices over {} stripes is out of bounds", m.version, m.bytes,
                m.slice_bytes, m.forwarding.stripes());
  } else if (m.image && m.bytes != image_.bytes()) {
    s = corrupt("version {}: a full version of {} bytes for a model of {}", m.version, m.bytes, image_.bytes());
  }
  if (!s.ok()) {
    log().error("consumer {}: bad version message: {}", options_.name, s.to_string());
    fail_version(m.version, s.message());
    return;
  }
  abandon_incoming();
  inc->memory = staging_pool_.acquire(m.bytes);
  // Forwarding is set up before staging accepts the first slice, so that no
  // slice arrives unseen by the relay.
  relay_.begin(inc->shape, inc->memory->data(), m.forwarding.stripes(), nullptr);
  if (Status r = relay_.set_children(m.forwarding.children, m.forwarding.directory, {}, m.forwarding.paths); !r.ok()) {
    log().error("consumer {}: forwarding plan: {}", options_.name, r.to_string());
  }
  if (Status r = relay_.watch(m.forwarding.watch); !r.ok()) {
    log().warn("consumer {}: standby links: {}", options_.name, r.to_string());
  }
  s = staging_.expect(m.transfer, m.bytes, m.slice_bytes, inc->memory->data(), inc->memory);
  if (!s.ok()) {
    relay_.end();
    fail_version(m.version, s.message());
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  incoming_ = inc;
  cv_.notify_all();
}

void Consumer::on_replan(const control::Replan& m) {
  std::shared_ptr<Incoming> inc;
  {
    std::lock_guard<std::mutex> lock(mu_);
    inc = incoming_;
  }
  if (!inc || m.transfer != inc->shape.id) return;  // a plan for something else
  if (m.forwarding.stripes() != inc->announce.forwarding.stripes()) {
    log().error("consumer {}: a re-plan with {} stripes for a version of {}", options_.name, m.forwarding.stripes(),
                inc->announce.forwarding.stripes());
    return;
  }
  // What each new child already holds, so that only the rest is forwarded.
  std::map<uint32_t, std::vector<bool>> have;
  for (const auto& [child, hex] : m.have) {
    auto bits = control::decode_bitmap(hex, inc->shape.slices());
    if (bits.ok()) have[child] = *bits;
  }
  if (Status r = relay_.set_children(m.forwarding.children, m.forwarding.directory, have, m.forwarding.paths); !r.ok()) {
    log().error("consumer {}: forwarding plan: {}", options_.name, r.to_string());
  }
  if (Status r = relay_.watch(m.forwarding.watch); !r.ok()) {
    log().warn("consumer {}: standby links: {}", options_.name, r.to_string());
  }
}

void Consumer::on_done(const control::Done& m) {
  std::shared_ptr<Incoming> inc;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!incoming_ || incoming_->announce.version != m.version || !incoming_->processed) return;
    inc = std::move(incoming_);
  }
  // Every consumer has the version: nothing more to forward, the staging can go.
  relay_.end();
  staging_.forget(inc->shape.id);
}

void Consumer::on_check(const control::Check& m) {
  // Hashing a large model takes a while: off the control link's reader thread.
  std::lock_guard<std::mutex> lock(mu_);
  check_requests_.push_back(m.version);
  cv_.notify_all();
}

void Consumer::answer_checks() {
  std::vector<uint64_t> requests;
  {
    std::lock_guard<std::mutex> lock(mu_);
    requests.swap(check_requests_);
  }
  for (uint64_t version : requests) {
    uint64_t held = 0, hash = 0;
    {
      std::shared_lock<std::shared_mutex> shared(tensors_mu_);
      held = this->version();
      hash = tensors_hash();
    }
    send(control::Checked{version, held, hash});
  }
}

void Consumer::report_unreachable_children() {
  uint64_t transfer = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (incoming_) transfer = incoming_->shape.id;
  }
  if (transfer == 0) return;
  if (transfer != reported_transfer_) {
    reported_transfer_ = transfer;
    reported_unreachable_.clear();
    reported_unheard_children_.clear();
  }
  for (uint32_t child : relay_.unheard_children()) {
    if (reported_unheard_children_.insert(child).second) send(control::Unreachable{transfer, child, true});
  }
  for (uint32_t child : relay_.unreachable_children()) {
    if (!reported_unreachable_.insert(child).second) continue;
    // The rails say why: one dead and one never measured, or all of them stalled.
    std::string rails;
    for (const auto& rail : relay_.telemetry(child)) {
      rails += fmt::format("{}{} {} ({:.0f} MB/s, {} bytes in flight, {} acked, {} failed, {} timed out)",
                           rails.empty() ? "" : "; ", rail.name, rail_state_name(rail.state), rail.bandwidth_bps / 1e6,
                           rail.inflight_bytes, rail.slices_acked, rail.errors, rail.timeouts);
    }
    log().warn("consumer {}: consumer {}, which it forwards transfer {} to, acknowledges nothing; rails: {}",
               options_.name, child, transfer, rails);
    send(control::Unreachable{transfer, child});
  }
}

void Consumer::report_unheard_peers() {
  {
    // Joined again: the coordinator's new record of this member holds nothing unheard.
    std::lock_guard<std::mutex> lock(mu_);
    if (joins_ != reported_joins_) reported_unheard_.clear();
    reported_joins_ = joins_;
  }
  std::vector<uint32_t> unheard = relay_.unheard_watched();
  if (unheard == reported_unheard_) return;
  if (!unheard.empty()) {
    log().warn("consumer {}: consumers {} in other sites, which it keeps standby links to, are heard on no rail",
               options_.name, fmt::join(unheard, ","));
  } else {
    log().info("consumer {}: every consumer it keeps a standby link to is heard again", options_.name);
  }
  send(control::Unheard{unheard});
  reported_unheard_ = std::move(unheard);
}

void Consumer::report_forwarded_links() {
  if (forwarded_.transfer == 0) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_.epoch != forwarded_.epoch) {
      forwarded_ = {};  // another producer: its version numbers mean something else
      return;
    }
  }
  control::Forwarded done{forwarded_.version, {}};
  for (const auto& [child, link] : relay_.finished_links(forwarded_.transfer)) {
    if (forwarded_.reported.insert(child).second) done.links[child] = link;
  }
  if (!done.links.empty()) send(done);
}

uint64_t Consumer::model_hash_now() {
  std::shared_lock<std::shared_mutex> shared(tensors_mu_);
  return tensors_hash();
}

uint64_t Consumer::tensors_hash() {
  if (!device_applier_) return model_hash(tensors_.data(), tensors_.size(), *hash_pool_);
  auto hash = device_applier_->model_hash(tensors_);
  if (hash.ok()) return *hash;
  // Answered as a hash no version has: the producer's check then sees a damaged copy.
  log().error("consumer {}: hashing the tensors on the GPU: {}", options_.name, hash.status().to_string());
  return 0;
}

Consumer::HeldModel Consumer::held_model() {
  std::lock_guard<std::mutex> no_commit_meanwhile(commit_mu_);
  HeldModel held;
  {
    std::lock_guard<std::mutex> lock(mu_);
    held.epoch = state_.held_epoch;
    held.version = state_.version;
  }
  held.hash = model_hash_now();
  return held;
}

void Consumer::worker_loop() {
  for (;;) {
    std::shared_ptr<Incoming> inc;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, Millis(50),
                   [&] { return closing_ || !check_requests_.empty() || (incoming_ && !incoming_->processed); });
      if (closing_) return;
      inc = incoming_ && !incoming_->processed ? incoming_ : nullptr;
    }
    answer_checks();
    report_unreachable_children();
    report_unheard_peers();
    report_forwarded_links();
    if (!inc) continue;
    if (!staging_.wait(inc->shape.id, Millis(50)).ok()) continue;
    const auto verify_start = Clock::now();
    const auto blob = staging_.bytes(inc->shape.id);
    // Every slice was verified as it landed; the digest of their checksums tells whether they
    // are the producer's slices, each in its place. No pass over the bytes.
    Status s;
    auto digest = staging_.digest(inc->shape.id);
    if (!digest.ok()) {
      s = digest.status();
    } else if (*digest != inc->announce.digest) {
      s = corrupt("version {}: the slices' checksums do not match the announced digest: slices from another "
                  "transfer, or in the wrong places", inc->announce.version);
    }
    auto staged = std::make_shared<Staged>();
    staged->version = inc->announce.version;
    staged->epoch = inc->epoch;
    staged->memory = inc->memory;
    staged->image = inc->announce.image;
    if (s.ok() && !staged->image) {
      auto buckets = unpack_blob(blob);
      if (!buckets.ok()) {
        s = buckets.status();
      } else if (device_applier_) {
        staged->buckets = std::move(buckets).value();  // the GPU verifies them at commit
      } else {
        std::optional<uint64_t> held;
        {
          std::lock_guard<std::mutex> lock(mu_);
          // A delta applies to its producer's base only: a version of another producer under the
          // same number is no base for it (verify then refuses the delta, and a full sync follows).
          const uint64_t base = ready_.empty() ? state_.version : ready_.back()->version;
          const uint64_t base_epoch = ready_.empty() ? state_.held_epoch : ready_.back()->epoch;
          if (base != 0 && base_epoch == inc->epoch) held = base;
        }
        auto chunks = applier_.verify(*buckets, held, options_.layout ? &held_ : nullptr);
        if (chunks.ok()) {
          staged->chunks = std::move(chunks).value();
        } else {
          s = chunks.status();
        }
      }
    }
    const double receive_seconds = std::chrono::duration<double>(verify_start - inc->started).count();
    bool stale = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      inc->processed = true;
      stale = inc->epoch != state_.epoch;
      if (s.ok() && !stale) {
        ready_.push_back(staged);
        ++state_.staged;
        state_.received_bytes += inc->shape.bytes;
        state_.last_receive_seconds = receive_seconds;
      }
      cv_.notify_all();
    }
    if (stale) {
      // Its producer was replaced while it was verified: the new one is told nothing of it (its
      // number would name a version of the new producer's).
      log().info("consumer {}: version {} of the producer before is dropped", options_.name, inc->announce.version);
      continue;
    }
    if (!s.ok()) {
      log().error("consumer {}: {}", options_.name, s.to_string());
      fail_version(inc->announce.version, s.message());
      continue;
    }
    forwarded_ = {inc->epoch, inc->announce.version, inc->shape.id, {}};
    for (const auto& [child, link] : relay_.finished_links(inc->shape.id)) forwarded_.reported.insert(child);
    send(control::Staged{inc->announce.version, receive_seconds, seconds_since(verify_start), relay_.child_links()});
    if (options_.on_staged) options_.on_staged(inc->announce.version);
    if (auto_commit_) (void)commit_ready();
  }
}

Status Consumer::commit_ready(uint64_t through) {
  std::lock_guard<std::mutex> one_at_a_time(commit_mu_);
  for (;;) {
    std::shared_ptr<Staged> st;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ready_.empty() || ready_.front()->version > through) return Status();
      st = ready_.front();
    }
    const auto start = Clock::now();
    Status s;
    {
      std::unique_lock<std::shared_mutex> exclusive(tensors_mu_);
      s = write_version(*st);
    }
    const double apply_seconds = seconds_since(start);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_.pop_front();
      if (s.ok()) {
        state_.version = st->version;
        state_.held_epoch = st->epoch;
        ++state_.commits;
        state_.last_apply_seconds = apply_seconds;
      }
      if (!s.ok()) state_.last_error = s;
      cv_.notify_all();
    }
    if (!s.ok()) {
      fail_version(st->version, s.message());
      return s;
    }
    send(control::Committed{st->version, apply_seconds});
    if (on_commit_) on_commit_(st->version);
  }
}

Status Consumer::write_version(const Staged& st) {
  const Layout* layout = options_.layout.get();
  if (device_applier_ && st.image) return device_applier_->copy_in(image_.views_of(st.memory->data()), tensors_);
  if (device_applier_) {
    std::optional<uint64_t> held;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // As at staging: a delta applies to its own producer's base only.
      if (state_.version != 0 && state_.held_epoch == st.epoch) held = state_.version;
    }
    return device_applier_->apply(st.buckets, held, tensors_);
  }
  if (st.image && layout != nullptr) {
    image_.unpack_remapped(st.memory->data(), *layout, tensors_, *hash_pool_);
  } else if (st.image) {
    image_.unpack(st.memory->data(), tensors_, *hash_pool_);
  } else if (layout != nullptr) {
    return apply_remapped(st.chunks, manifest_, *layout, tensors_, *hash_pool_);
  } else {
    return applier_.apply(st.chunks, tensors_);
  }
  return Status();
}

Status Consumer::set_auto_commit(bool on) {
  auto_commit_ = on;
  return on ? commit_ready() : Status();
}

Status Consumer::commit_through(uint64_t version) { return commit_ready(version); }

std::vector<uint64_t> Consumer::staged_versions() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint64_t> out;
  for (const auto& st : ready_) out.push_back(st->version);
  return out;
}

Result<uint64_t> Consumer::pull(Millis timeout) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return closing_ || !ready_.empty(); });
  }
  DC_RETURN_IF_ERROR(commit_ready());
  return version();
}

Status Consumer::wait_version(uint64_t version, Millis timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (cv_.wait_for(lock, timeout, [&] { return closing_ || state_.version >= version || state_.refused; }) &&
      state_.version >= version) {
    return Status();
  }
  return deadline_exceeded("version {} not committed within {} ms (holding {}{})", version, timeout.count(),
                           state_.version, state_.last_error.ok() ? "" : "; " + state_.last_error.message());
}

void Consumer::progress_loop() {
  for (;;) {
    std::shared_ptr<Incoming> inc;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, Millis(100), [&] { return closing_.load(); });
      if (closing_) return;
      inc = incoming_;
    }
    if (!inc || inc->processed) continue;
    const auto present = staging_.present(inc->shape.id);
    uint32_t arrived = 0;
    for (uint8_t p : present) arrived += p;
    send(control::Progress{inc->shape.id, arrived, seconds_since(inc->started), control::encode_bitmap(present)});
  }
}

}  // namespace deltacast
