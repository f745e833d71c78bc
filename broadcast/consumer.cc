#include "broadcast/consumer.h"

#include <sys/socket.h>
#include <unistd.h>

#include "broadcast/planner.h"
#include "broadcast/version_blob.h"
#include "core/hash.h"
#include "core/log.h"

namespace deltacast {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

// The version being received.
struct Consumer::Incoming {
  uint64_t version = 0;
  uint64_t base = 0;
  bool full = false;
  uint64_t transfer = 0;
  uint64_t bytes = 0;
  uint32_t slice_bytes = 0;
  uint32_t stripes = 1;
  uint64_t blob_hash = 0;
  std::vector<std::vector<uint32_t>> chains;
  std::shared_ptr<AlignedBuffer> memory;
  Clock::time_point started;
  bool processed = false;  // verified (or failed); staging may still be serving children
};

// A verified version waiting to be committed.
struct Consumer::Staged {
  uint64_t version = 0;
  std::shared_ptr<AlignedBuffer> memory;  // the chunks point into it
  VersionChunks chunks;
};

Result<std::unique_ptr<Consumer>> Consumer::create(Manifest manifest, std::vector<TensorView> tensors,
                                                   ConsumerOptions options) {
  DC_RETURN_IF_ERROR(manifest.check_views(tensors));
  if (options.rails.empty()) return invalid_argument("a consumer needs at least one data rail address");
  if (options.coordinators.empty()) return invalid_argument("a consumer needs the producer's address");
  std::unique_ptr<Consumer> c(new Consumer(std::move(manifest), std::move(tensors), std::move(options)));
  ListenOptions listen;
  listen.token = c->options_.token;
  listen.netns = c->options_.netns;
  DC_ASSIGN_OR_RETURN(c->listener_, tcp::TcpListener::create(c->options_.rails, &c->staging_, listen));
  c->staging_.set_on_slice([relay = &c->relay_](const SliceRef& s) { relay->on_slice(s.transfer, s.index, s.checksum); });
  return c;
}

Consumer::Consumer(Manifest manifest, std::vector<TensorView> tensors, ConsumerOptions options)
    : manifest_(std::move(manifest)),
      tensors_(std::move(tensors)),
      options_(std::move(options)),
      applier_(manifest_, options_.threads),
      hash_pool_(std::make_unique<ThreadPool>(options_.threads)),
      staging_([] {
        StagingOptions staging;
        staging.announce_wait = Millis(3000);  // slices may overtake their version's announcement
        return staging;
      }()),
      relay_([&] {
        RelayOptions r;
        r.local_rails = options_.rails;
        r.channel.token = options_.token;
        r.channel.netns = options_.netns;
        r.spray = options_.spray;
        return r;
      }()),
      auto_commit_(options_.auto_commit) {}

Consumer::~Consumer() { close(); }

void Consumer::close() {
  if (closing_.exchange(true)) return;
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

void Consumer::send(const Json& message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (link_ && link_->open()) (void)link_->send(message);
}

Status Consumer::join(int fd) {
  std::vector<std::string> rails;
  for (const auto& e : listener_->endpoints()) rails.push_back(e.to_string());
  Json hello;
  {
    std::lock_guard<std::mutex> lock(mu_);
    hello = {{"type", msg::kJoin},
             {"token", options_.token},
             {"name", options_.name},
             {"manifest", manifest_to_json(manifest_)},
             {"manifest_hash", manifest_.hash()},
             {"version", state_.version},
             {"epoch", state_.epoch},
             {"rails", rails}};
  }
  const auto deadline = Clock::now() + Millis(5000);
  DC_RETURN_IF_ERROR(write_message(fd, hello, deadline, &closing_));
  DC_ASSIGN_OR_RETURN(Json answer, read_message(fd, deadline, Millis(5000), &closing_));
  if (answer["type"] == msg::kReject) {
    const std::string reason = answer.value("reason", std::string("refused"));
    const StatusCode code = reason.find("token") != std::string::npos ? StatusCode::kPermissionDenied
                            : reason.find("manifest") != std::string::npos ? StatusCode::kMismatch
                                                                            : StatusCode::kFailedPrecondition;
    std::lock_guard<std::mutex> lock(mu_);
    state_.refused = true;
    state_.last_error = Status(code, "the producer refused this consumer: " + reason);
    cv_.notify_all();
    return state_.last_error;
  }
  if (answer["type"] != msg::kWelcome) return corrupt("expected a welcome, got '{}'", answer["type"].dump());
  DC_ASSIGN_OR_RETURN(uint32_t id, field<uint32_t>(answer, "id"));
  DC_ASSIGN_OR_RETURN(uint64_t epoch, field<uint64_t>(answer, "epoch"));
  auto link = std::make_unique<ControlLink>(
      fd, options_.control, [this](const Json& m) { on_message(m); },
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
  state_.id = id;
  if (state_.epoch != epoch && state_.version != 0) {
    log().info("consumer {}: a new producer (epoch {:x}); version {} will be replaced by a full sync", options_.name,
               epoch, state_.version);
  }
  state_.epoch = epoch;
  state_.connected = true;
  state_.last_error = Status();
  link_ = std::move(link);
  joined_once_ = true;
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
    auto fd = tcp::open_socket(options_.netns);
    Status s = fd.status();
    if (fd.ok()) {
      const Endpoint& coordinator = options_.coordinators[attempt++ % options_.coordinators.size()];
      s = tcp::connect_socket(*fd, Endpoint{"0.0.0.0", 0}, coordinator, Millis(1000));
      if (s.ok()) s = join(*fd);
      if (!s.ok()) ::close(*fd);
    }
    if (s.ok()) {
      backoff = options_.reconnect_min;
      continue;
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (state_.refused) return;
      state_.last_error = s;
      cv_.notify_all();
      cv_.wait_for(lock, backoff, [&] { return closing_.load(); });
    }
    backoff = std::min(backoff * 2, options_.reconnect_max);
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
  staging_.forget(gone->transfer);
}

void Consumer::on_message(const Json& m) {
  const std::string type = m["type"].get<std::string>();
  if (type == msg::kVersion) {
    on_version(m);
  } else if (type == msg::kPlan) {
    on_plan(m);
  } else if (type == msg::kDone) {
    on_done(m);
  } else if (type == msg::kCheck) {
    on_check(m);
  } else {
    log().warn("consumer {}: ignoring control message '{}'", options_.name, type);
  }
}

namespace {

// Stripe chains and the data endpoints of their members, from a version or plan message.
Status read_plan(const Json& m, uint32_t stripes, std::vector<std::vector<uint32_t>>* chains,
                 std::map<uint32_t, PeerEndpoints>* directory) {
  DC_ASSIGN_OR_RETURN(*chains, field<std::vector<std::vector<uint32_t>>>(m, "chains"));
  if (chains->size() != stripes) return corrupt("plan has {} chains for {} stripes", chains->size(), stripes);
  using PeerList = std::map<std::string, std::vector<std::string>>;
  DC_ASSIGN_OR_RETURN(PeerList peers, field<PeerList>(m, "directory"));
  for (const auto& [id, rails] : peers) {
    PeerEndpoints endpoints;
    for (const auto& r : rails) {
      DC_ASSIGN_OR_RETURN(Endpoint e, parse_endpoint(r));
      endpoints.push_back(e);
    }
    (*directory)[static_cast<uint32_t>(std::stoul(id))] = endpoints;
  }
  return Status();
}

std::vector<uint32_t> children_of(uint32_t id, const std::vector<std::vector<uint32_t>>& chains) {
  std::vector<uint32_t> children;
  for (const auto& chain : chains) {
    uint32_t child = 0;
    for (size_t i = 0; i + 1 < chain.size(); ++i) {
      if (chain[i] == id) child = chain[i + 1];
    }
    children.push_back(child);
  }
  return children;
}

}  // namespace

void Consumer::on_version(const Json& m) {
  auto inc = std::make_shared<Incoming>();
  std::map<uint32_t, PeerEndpoints> directory;
  Status s;
  [&] {
    auto version = field<uint64_t>(m, "version");
    auto base = field<uint64_t>(m, "base");
    auto full = field<bool>(m, "full");
    auto transfer = field<uint64_t>(m, "transfer");
    auto bytes = field<uint64_t>(m, "bytes");
    auto slice = field<uint32_t>(m, "slice_bytes");
    auto stripes = field<uint32_t>(m, "stripes");
    auto hash = field<uint64_t>(m, "blob_hash");
    for (const Status& f : {version.status(), base.status(), full.status(), transfer.status(), bytes.status(),
                            slice.status(), stripes.status(), hash.status()}) {
      if (!f.ok()) {
        s = f;
        return;
      }
    }
    // A version can never be much larger than the dense model (a full sync plus headers).
    const uint64_t limit = 2 * manifest_.total_bytes() + (64u << 20);
    if (*bytes > limit || *slice < 1024 || *slice > (64u << 20) || *stripes == 0 || *stripes > 64) {
      s = corrupt("version {}: {} bytes in {}-byte slices over {} stripes is out of bounds", *version, *bytes, *slice,
                  *stripes);
      return;
    }
    *inc = Incoming{*version, *base, *full, *transfer, *bytes, *slice, *stripes, *hash, {}, {}, Clock::now(), false};
    s = read_plan(m, *stripes, &inc->chains, &directory);
  }();
  if (!s.ok()) {
    log().error("consumer {}: bad version message: {}", options_.name, s.to_string());
    send({{"type", msg::kFailed}, {"version", m.value("version", uint64_t{0})}, {"reason", s.message()}});
    return;
  }
  abandon_incoming();
  inc->memory = staging_pool_.acquire(inc->bytes);
  uint32_t id = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = state_.id;
  }
  // Forwarding is set up before staging accepts the first slice, so that no
  // slice arrives unseen by the relay.
  relay_.begin(inc->transfer, inc->memory->data(), inc->bytes, inc->slice_bytes, inc->stripes, false);
  if (Status r = relay_.set_children(children_of(id, inc->chains), directory, {}); !r.ok()) {
    log().error("consumer {}: forwarding plan: {}", options_.name, r.to_string());
  }
  s = staging_.expect(inc->transfer, inc->bytes, inc->slice_bytes, inc->memory->data(), inc->memory);
  if (!s.ok()) {
    relay_.end();
    send({{"type", msg::kFailed}, {"version", inc->version}, {"reason", s.message()}});
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  incoming_ = inc;
  cv_.notify_all();
}

void Consumer::on_plan(const Json& m) {
  std::shared_ptr<Incoming> inc;
  uint32_t id = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    inc = incoming_;
    id = state_.id;
  }
  auto transfer = field<uint64_t>(m, "transfer");
  if (!inc || !transfer.ok() || *transfer != inc->transfer) return;  // a plan for something else
  std::vector<std::vector<uint32_t>> chains;
  std::map<uint32_t, PeerEndpoints> directory;
  if (Status s = read_plan(m, inc->stripes, &chains, &directory); !s.ok()) {
    log().error("consumer {}: bad plan: {}", options_.name, s.to_string());
    return;
  }
  // What each new child already holds, so that only the rest is forwarded.
  std::map<uint32_t, std::vector<bool>> have;
  const uint32_t slices = static_cast<uint32_t>((inc->bytes + inc->slice_bytes - 1) / inc->slice_bytes);
  if (m.contains("have") && m["have"].is_object()) {
    for (const auto& [key, hex] : m["have"].items()) {
      if (!hex.is_string()) continue;
      auto bits = decode_bitmap(hex.get<std::string>(), slices);
      if (bits.ok()) have[static_cast<uint32_t>(std::stoul(key))] = *bits;
    }
  }
  if (Status r = relay_.set_children(children_of(id, chains), directory, have); !r.ok()) {
    log().error("consumer {}: forwarding plan: {}", options_.name, r.to_string());
  }
}

void Consumer::on_done(const Json& m) {
  auto version = field<uint64_t>(m, "version");
  std::shared_ptr<Incoming> inc;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!incoming_ || !version.ok() || incoming_->version != *version || !incoming_->processed) return;
    inc = std::move(incoming_);
  }
  // Every consumer has the version: nothing more to forward, the staging can go.
  relay_.end();
  staging_.forget(inc->transfer);
}

void Consumer::on_check(const Json& m) {
  auto version = field<uint64_t>(m, "version");
  if (!version.ok()) return;
  // Hashing a large model takes a while: off the control link's reader thread.
  std::lock_guard<std::mutex> lock(mu_);
  check_requests_.push_back(*version);
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
      hash = model_hash(tensors_.data(), tensors_.size(), *hash_pool_);
    }
    send({{"type", msg::kChecked}, {"version", version}, {"held", held}, {"model_hash", hash}});
  }
}

uint64_t Consumer::model_hash_now() {
  std::shared_lock<std::shared_mutex> shared(tensors_mu_);
  return model_hash(tensors_.data(), tensors_.size(), *hash_pool_);
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
    if (!inc) continue;
    if (!staging_.wait(inc->transfer, Millis(50)).ok()) continue;
    const auto verify_start = Clock::now();
    const auto blob = staging_.bytes(inc->transfer);
    Status s;
    if (content_hash(blob.data(), blob.size(), *hash_pool_) != inc->blob_hash) {
      // Whether bytes changed after they arrived, or arrived as the sender sent them: which
      // side to look at when this happens.
      const auto changed = staging_.changed_slices(inc->transfer);
      s = corrupt("version {}: the received bytes do not match their hash ({})", inc->version,
                  changed.empty() ? std::string("every slice matches the checksum it was sent with")
                                  : fmt::format("{} slice(s) changed after arrival, first {}", changed.size(), changed[0]));
    }
    auto staged = std::make_shared<Staged>();
    staged->version = inc->version;
    staged->memory = inc->memory;
    if (s.ok()) {
      auto buckets = unpack_blob(blob);
      if (!buckets.ok()) {
        s = buckets.status();
      } else {
        std::optional<uint64_t> held;
        {
          std::lock_guard<std::mutex> lock(mu_);
          const uint64_t base = ready_.empty() ? state_.version : ready_.back()->version;
          if (base != 0) held = base;
        }
        auto chunks = applier_.verify(*buckets, held);
        if (chunks.ok()) {
          staged->chunks = std::move(chunks).value();
        } else {
          s = chunks.status();
        }
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      inc->processed = true;
      if (s.ok()) ready_.push_back(staged);
      cv_.notify_all();
    }
    if (!s.ok()) {
      log().error("consumer {}: {}", options_.name, s.to_string());
      send({{"type", msg::kFailed}, {"version", inc->version}, {"reason", s.message()}});
      continue;
    }
    Json rates = Json::object();
    for (const auto& [child, link] : relay_.child_links()) {
      if (auto rate = receiver_rate(link)) rates[std::to_string(child)] = *rate;
    }
    send({{"type", msg::kStaged},
          {"version", inc->version},
          {"receive_seconds", std::chrono::duration<double>(verify_start - inc->started).count()},
          {"verify_seconds", seconds_since(verify_start)},
          {"rates", rates}});
    if (auto_commit_) (void)commit_ready();
  }
}

Status Consumer::commit_ready() {
  std::lock_guard<std::mutex> one_at_a_time(commit_mu_);
  for (;;) {
    std::shared_ptr<Staged> st;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ready_.empty()) return Status();
      st = ready_.front();
    }
    const auto start = Clock::now();
    Status s;
    {
      std::unique_lock<std::shared_mutex> exclusive(tensors_mu_);
      s = applier_.apply(st->chunks, tensors_);
    }
    const double apply_seconds = seconds_since(start);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_.pop_front();
      if (s.ok()) state_.version = st->version;
      if (!s.ok()) state_.last_error = s;
      cv_.notify_all();
    }
    if (!s.ok()) {
      send({{"type", msg::kFailed}, {"version", st->version}, {"reason", s.message()}});
      return s;
    }
    send({{"type", msg::kCommitted}, {"version", st->version}, {"apply_seconds", apply_seconds}});
    if (on_commit_) on_commit_(st->version);
  }
}

Status Consumer::set_auto_commit(bool on) {
  auto_commit_ = on;
  return on ? commit_ready() : Status();
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
    const auto present = staging_.present(inc->transfer);
    uint32_t arrived = 0;
    for (uint8_t p : present) arrived += p;
    send({{"type", msg::kProgress},
          {"transfer", inc->transfer},
          {"arrived", arrived},
          {"seconds", seconds_since(inc->started)},
          {"have", encode_bitmap(present)}});
  }
}

}  // namespace deltacast
