#include "broadcast/membership.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "broadcast/tcp/wire.h"
#include "broadcast/planner.h"
#include "core/log.h"

namespace deltacast {

namespace {
constexpr size_t kMaxRails = 16;
constexpr size_t kChecksKept = 16;
}  // namespace

Result<std::unique_ptr<Membership>> Membership::create(Manifest manifest, MembershipOptions options) {
  std::unique_ptr<Membership> m(new Membership(std::move(manifest), std::move(options)));
  DC_ASSIGN_OR_RETURN(auto bound, tcp::listen_socket(m->options_.netns, m->options_.listen));
  m->listen_fd_ = bound.first;
  m->address_ = bound.second;
  m->acceptor_ = std::thread([raw = m.get()] { raw->accept_loop(); });
  return m;
}

Membership::~Membership() { close(); }

void Membership::close() {
  if (closed_.exchange(true)) return;
  if (acceptor_.joinable()) acceptor_.join();
  for (auto& j : joiners_) j->thread.join();
  joiners_.clear();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  std::map<uint32_t, std::shared_ptr<ControlLink>> links;
  std::vector<std::shared_ptr<ControlLink>> dead;
  {
    std::lock_guard<std::mutex> lock(mu_);
    links.swap(links_);
    dead.swap(dead_links_);
    members_.clear();
    ++changes_;
    cv_.notify_all();
  }
  for (auto& [id, link] : links) link->close();
  links.clear();  // joins each link's threads
  dead.clear();
}

void Membership::accept_loop() {
  while (!closed_) {
    pollfd p{listen_fd_, POLLIN, 0};
    const int ready = poll(&p, 1, 100);
    reap();
    if (ready <= 0 || closed_) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    auto joiner = std::make_unique<Joiner>();
    Joiner* raw = joiner.get();
    raw->thread = std::thread([this, fd, raw] {
      admit(fd);
      raw->done = true;
    });
    joiners_.push_back(std::move(joiner));
  }
}

void Membership::reap() {
  for (auto it = joiners_.begin(); it != joiners_.end();) {
    if ((*it)->done) {
      (*it)->thread.join();
      it = joiners_.erase(it);
    } else {
      ++it;
    }
  }
  std::vector<std::shared_ptr<ControlLink>> dead;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dead.swap(dead_links_);
  }
  dead.clear();  // outside the lock: joins the links' threads
}

Status Membership::check_join(const Json& join) const {
  if (join["type"] != msg::kJoin) return corrupt("expected a join, got '{}'", join["type"].dump());
  DC_ASSIGN_OR_RETURN(uint64_t token, field<uint64_t>(join, "token"));
  if (token != options_.token) return permission_denied("wrong token");
  DC_ASSIGN_OR_RETURN(uint64_t manifest_hash, field<uint64_t>(join, "manifest_hash"));
  if (manifest_hash != manifest_.hash()) {
    auto theirs = manifest_from_json(join.contains("manifest") ? join["manifest"] : Json());
    if (!theirs.ok()) return mismatch("manifest mismatch (the consumer's manifest is unreadable: {})", theirs.status().message());
    std::string diff = theirs->first_difference(manifest_);
    if (diff.empty()) diff = "same tensors, different manifest hash";
    return mismatch("manifest mismatch: {} (consumer vs producer)", diff);
  }
  return Status();
}

void Membership::admit(int fd) {
  const auto deadline = ControlClock::now() + options_.join_timeout;
  tcp::tune_socket(fd, tcp::SocketOptions{});
  const std::string peer = tcp::peer_name(fd);
  auto join = read_message(fd, deadline, options_.join_timeout, &closed_);
  if (!join.ok()) {
    log().warn("coordinator: dropped {} before it joined: {}", peer, join.status().message());
    ::close(fd);
    return;
  }
  Status s = check_join(*join);
  MemberRecord record;
  if (s.ok()) {
    record.name = join->value("name", std::string());
    record.peer = peer;
    auto rails = field<std::vector<std::string>>(*join, "rails");
    auto version = field<uint64_t>(*join, "version");
    auto epoch = field<uint64_t>(*join, "epoch");
    if (!rails.ok() || !version.ok() || !epoch.ok()) {
      s = corrupt("join without rails, version or epoch");
    } else if (rails->empty() || rails->size() > kMaxRails) {
      s = invalid_argument("a consumer needs 1 to {} data rails, not {}", kMaxRails, rails->size());
    } else {
      for (const auto& r : *rails) {
        auto e = parse_endpoint(r);
        if (!e.ok()) {
          s = e.status();
          break;
        }
        record.rails.push_back(*e);
      }
      record.base = *epoch == options_.epoch ? *version : 0;
      record.committed = record.base;
    }
  }
  if (s.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (members_.size() >= options_.max_members) s = resource_exhausted("the producer has {} members already", members_.size());
  }
  if (!s.ok()) {
    log().warn("coordinator: refused {} ({}): {}", peer, record.name, s.message());
    (void)write_message(fd, {{"type", msg::kReject}, {"reason", s.message()}}, deadline, &closed_);
    ::close(fd);
    return;
  }
  uint32_t id = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = next_id_++;
  }
  record.id = id;
  const Json welcome = {{"type", msg::kWelcome}, {"id", id}, {"epoch", options_.epoch}, {"version", record.base}};
  if (Status w = write_message(fd, welcome, deadline, &closed_); !w.ok()) {
    ::close(fd);
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) {
    ::close(fd);
    return;
  }
  members_[id] = record;
  // The link's callbacks may run before it is stored: both take the lock first.
  links_[id] = std::make_shared<ControlLink>(
      fd, options_.control, [this, id](const Json& m) { on_message(id, m); },
      [this, id](const Status& why) { on_close(id, why); });
  ++changes_;
  cv_.notify_all();
  log().info("coordinator: consumer {} '{}' joined from {} with {} rails (holds version {})", id, record.name, peer,
             record.rails.size(), record.base);
}

void Membership::on_close(uint32_t id, const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = links_.find(id);
  if (it != links_.end()) {
    dead_links_.push_back(std::move(it->second));
    links_.erase(it);
  }
  auto m = members_.find(id);
  if (m != members_.end()) {
    if (!closed_) {
      // A consumer closing its end is routine; anything else (a reset, silence) is worth a warning.
      const bool clean = why.message().find("closed by the peer") != std::string::npos;
      log().log(clean ? spdlog::level::info : spdlog::level::warn, "coordinator: consumer {} '{}' left: {}", id,
                m->second.name, why.message());
    }
    members_.erase(m);
  }
  ++changes_;
  cv_.notify_all();
}

namespace {

// Folds one untrusted message into a member's record; an error drops the member.
Status fold(const Json& m, MemberRecord& r, std::map<uint32_t, MemberRecord>& all) {
  const std::string type = m["type"].get<std::string>();
  if (type == msg::kProgress) {
    DC_ASSIGN_OR_RETURN(r.transfer, field<uint64_t>(m, "transfer"));
    DC_ASSIGN_OR_RETURN(r.arrived, field<uint32_t>(m, "arrived"));
    DC_ASSIGN_OR_RETURN(r.have, field<std::string>(m, "have"));
  } else if (type == msg::kStaged) {
    DC_ASSIGN_OR_RETURN(uint64_t version, field<uint64_t>(m, "version"));
    r.base = std::max(r.base, version);
    r.receive_seconds = m.value("receive_seconds", 0.0);
    // What this member measured sending to its children (planner.h, receiver_rate): a
    // bottleneck link's rate (the child is slow), or 0 for a link that kept up.
    if (m.contains("rates") && m["rates"].is_object()) {
      for (const auto& [key, value] : m["rates"].items()) {
        if (!value.is_number()) continue;
        const uint32_t child = static_cast<uint32_t>(std::strtoul(key.c_str(), nullptr, 10));
        auto c = all.find(child);
        const double rate = value.get<double>();
        if (c == all.end() || !(rate >= 0)) continue;
        MemberRecord& child_record = c->second;
        if (rate > 0) {
          child_record.rate = smoothed_rate(child_record.rate, rate);
          child_record.rate_from = r.id;
          child_record.kept_up_rounds = 0;
        } else if (!child_record.slow) {
          child_record.rate = 0;
        } else if (version != child_record.kept_up_version) {
          // A slow member at the tails is fed by several parents at their own pace, and some of
          // those links keep up even while its port is slow: it rejoins the chains only after
          // kKeptUpRounds rounds in which no parent found it a bottleneck.
          child_record.kept_up_version = version;
          if (++child_record.kept_up_rounds >= kKeptUpRounds) child_record.rate = 0;
        }
      }
    }
  } else if (type == msg::kCommitted) {
    DC_ASSIGN_OR_RETURN(uint64_t version, field<uint64_t>(m, "version"));
    r.committed = std::max(r.committed, version);
    r.base = std::max(r.base, version);
    r.apply_seconds = m.value("apply_seconds", 0.0);
  } else if (type == msg::kFailed) {
    DC_ASSIGN_OR_RETURN(r.failed_version, field<uint64_t>(m, "version"));
    r.last_failure = failed_precondition("{}", m.value("reason", std::string("failed")));
    r.base = 0;  // whatever it holds staged is not a base to build on: a full sync follows
  } else if (type == msg::kChecked) {
    DC_ASSIGN_OR_RETURN(uint64_t version, field<uint64_t>(m, "version"));
    DC_ASSIGN_OR_RETURN(uint64_t held, field<uint64_t>(m, "held"));
    DC_ASSIGN_OR_RETURN(uint64_t hash, field<uint64_t>(m, "model_hash"));
    r.checks[version] = {held, hash};
    while (r.checks.size() > kChecksKept) r.checks.erase(r.checks.begin());
  } else {
    return corrupt("unexpected control message '{}'", type);
  }
  return Status();
}

}  // namespace

void Membership::on_message(uint32_t id, const Json& message) {
  std::shared_ptr<ControlLink> bad;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = members_.find(id);
    if (it == members_.end()) return;
    Status s = fold(message, it->second, members_);
    if (!s.ok()) {
      log().error("coordinator: dropping consumer {} '{}': {}", id, it->second.name, s.message());
      auto link = links_.find(id);
      if (link != links_.end()) bad = link->second;
    }
    ++changes_;
    cv_.notify_all();
  }
  if (bad) bad->close();  // on_close follows from the link's thread
}

std::vector<MemberRecord> Membership::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<MemberRecord> out;
  for (const auto& [id, r] : members_) out.push_back(r);
  return out;
}

std::optional<MemberRecord> Membership::member(uint32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = members_.find(id);
  if (it == members_.end()) return std::nullopt;
  return it->second;
}

void Membership::send(uint32_t id, const Json& message) {
  std::shared_ptr<ControlLink> link;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = links_.find(id);
    if (it == links_.end()) return;
    link = it->second;
  }
  (void)link->send(message);  // a failure shuts the link down; on_close removes the member
}

bool Membership::wait(Millis timeout, const std::function<bool(const std::map<uint32_t, MemberRecord>&)>& ready) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return closed_ || ready(members_); }) && !closed_;
}

void Membership::update(const std::function<void(std::map<uint32_t, MemberRecord>&)>& fn) {
  std::lock_guard<std::mutex> lock(mu_);
  fn(members_);
  ++changes_;
  cv_.notify_all();
}

void Membership::notify() {
  std::lock_guard<std::mutex> lock(mu_);
  ++changes_;
  cv_.notify_all();
}

uint64_t Membership::changes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return changes_;
}

}  // namespace deltacast
