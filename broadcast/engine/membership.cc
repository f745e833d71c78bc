#include "broadcast/engine/membership.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "broadcast/transport/socket.h"
#include "core/log.h"

namespace deltacast {

namespace {
constexpr size_t kChecksKept = 16;
}  // namespace

Result<std::unique_ptr<Membership>> Membership::create(Manifest manifest, MembershipOptions options) {
  std::unique_ptr<Membership> m(new Membership(std::move(manifest), std::move(options)));
  DC_ASSIGN_OR_RETURN(auto bound, net::listen_socket(m->options_.netns, m->options_.listen));
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

Status Membership::check_join(const control::Join& join) const {
  if (join.protocol != control::kProtocolVersion) {
    return failed_precondition("control protocol {} (the producer speaks {})", join.protocol, control::kProtocolVersion);
  }
  if (join.manifest_hash != manifest_.hash()) {
    auto theirs = Manifest::create(join.manifest);
    if (!theirs.ok()) return mismatch("manifest mismatch (the consumer's manifest is unreadable: {})", theirs.status().message());
    std::string diff = theirs->first_difference(manifest_);
    if (diff.empty()) diff = "same tensors, different manifest hash";
    return mismatch("manifest mismatch: {} (consumer vs producer)", diff);
  }
  if (join.transport != options_.transport) {
    return mismatch("transport mismatch: the consumer receives over '{}', the group uses '{}'", join.transport,
                    options_.transport);
  }
  return Status();
}

void Membership::admit(int fd) {
  const auto deadline = ControlClock::now() + options_.join_timeout;
  net::tune_socket(fd, net::SocketOptions{});
  const std::string peer = net::peer_name(fd);
  // The handshake first: a peer that does not prove it holds the group's secret (or asks for
  // another protection) is dropped before anything of it is parsed; the handshake told it why.
  auto session = net::shake_hands(fd, trust::Role::kServer, options_.trust, trust::Purpose::kControl, deadline, &closed_);
  if (!session.ok()) {
    log().warn("coordinator: refused {}: {}", peer, session.status().message());
    ::close(fd);
    return;
  }
  auto text = read_control_frame(fd, *session->seals.incoming, deadline, options_.join_timeout, &closed_);
  auto message = text.ok() ? control::decode_text(*text) : Result<control::Message>(text.status());
  if (!message.ok()) {
    log().warn("coordinator: dropped {} before it joined: {}", peer, message.status().message());
    ::close(fd);
    return;
  }
  // A group request never gets here: its handshake names the coordinator's purpose, refused above.
  const auto* join = std::get_if<control::Join>(&*message);
  Status s = join != nullptr ? check_join(*join) : corrupt("expected a join, got '{}'", control::type_name(*message));
  MemberRecord record;
  if (s.ok()) {
    record.name = join->name;
    record.node = join->node;
    record.site = join->site;
    record.defers_commit = join->defers_commit;
    if (join->held) {
      auto held = HeldRanges::create(manifest_, *join->held);
      if (held.ok()) {
        // A layout that holds every element (a whole model, its tensors fused or renamed) is served
        // as a consumer without one: the version as it is, not encoded again and cut to a selection.
        if (held->held_elements() != manifest_.total_elements()) {
          record.held = std::make_shared<const HeldRanges>(std::move(held).value());
        }
      } else {
        s = held.status().with_context("what the consumer holds");
      }
    }
    record.peer = peer;
    record.protection = std::string(trust::protection_name(session->mode()));
    record.rails = join->rails;
    record.base = join->epoch == options_.epoch ? join->version : 0;
    record.committed = record.base;
    std::lock_guard<std::mutex> lock(mu_);
    if (members_.size() >= options_.max_members) s = resource_exhausted("the producer has {} members already", members_.size());
  }
  if (!s.ok()) {
    log().warn("coordinator: refused {} ({}): {}", peer, join != nullptr ? join->name : "", s.message());
    (void)write_control_frame(fd, control::encode_text(control::Reject{s.code(), s.message()}),
                              *session->seals.outgoing, deadline, &closed_);
    ::close(fd);
    return;
  }
  uint32_t id = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = next_id_++;
  }
  record.id = id;
  const control::Welcome welcome{id, options_.epoch, record.base};
  if (Status w = write_control_frame(fd, control::encode_text(welcome), *session->seals.outgoing, deadline, &closed_);
      !w.ok()) {
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
      fd, std::move(session).value(), options_.control, [this, id](const control::Message& m) { on_message(id, m); },
      [this, id](const Status& why) { on_close(id, why); });
  ++changes_;
  cv_.notify_all();
  log().info("coordinator: consumer {} '{}' on node '{}'{} joined from {} with {} rails over {} (holds version {})", id,
             record.name, record.node, record.site.empty() ? std::string() : fmt::format(" in site '{}'", record.site), peer, record.rails.size(), options_.transport, record.base);
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
  if (options_.rates != nullptr) options_.rates->forget(id);
  ++changes_;
  cv_.notify_all();
}

// Folds one message from member `r` into its record; anything a consumer does not send drops it.
Status Membership::fold(const control::Message& message, MemberRecord& r) {
  return std::visit(
      control::Overloaded{
          [&](const control::Progress& m) {
            r.transfer = m.transfer;
            r.arrived = m.arrived;
            r.have = m.have;
            return Status();
          },
          [&](const control::Staged& m) {
            r.base = std::max(r.base, m.version);
            r.receive_seconds = m.receive_seconds;
            if (options_.rates != nullptr) {
              for (const auto& [child, sample] : m.links) {
                if (members_.count(child)) options_.rates->record(r.id, child, sample, m.version);
              }
            }
            return Status();
          },
          [&](const control::Forwarded& m) {
            if (options_.rates != nullptr) {
              for (const auto& [child, sample] : m.links) {
                if (members_.count(child)) options_.rates->record_link(r.id, child, sample, m.version);
              }
            }
            return Status();
          },
          [&](const control::Committed& m) {
            r.committed = std::max(r.committed, m.version);
            r.base = std::max(r.base, m.version);
            r.apply_seconds = m.apply_seconds;
            return Status();
          },
          [&](const control::Failed& m) {
            r.failed_version = m.version;
            r.last_failure = failed_precondition("{}", m.reason);
            r.base = 0;  // whatever it holds staged is not a base to build on: a full sync follows
            return Status();
          },
          [&](const control::Unreachable& m) {
            if (m.transfer != r.unreachable_transfer) {
              r.unreachable.clear();
              r.unheard_children.clear();
            }
            r.unreachable_transfer = m.transfer;
            auto& reported = m.early ? r.unheard_children : r.unreachable;
            if (reported.size() < control::kMaxStripes) reported.insert(m.member);  // its children only
            return Status();
          },
          [&](const control::Unheard& m) {
            // As many as it could watch at most (a sentinel watches one member per other site).
            constexpr size_t kMostWatched = 1024;
            std::map<uint32_t, std::chrono::steady_clock::time_point> unheard;
            for (uint32_t id : m.members) {
              if (unheard.size() >= kMostWatched) break;
              const auto before = r.unheard.find(id);
              unheard[id] = before != r.unheard.end() ? before->second : std::chrono::steady_clock::now();
            }
            r.unheard = std::move(unheard);
            return Status();
          },
          [&](const control::Checked& m) {
            r.checks[m.version] = {m.held, m.model_hash};
            while (r.checks.size() > kChecksKept) r.checks.erase(r.checks.begin());
            return Status();
          },
          [&](const auto&) { return corrupt("a consumer does not send '{}'", control::type_name(message)); }},
      message);
}

void Membership::on_message(uint32_t id, const control::Message& message) {
  std::shared_ptr<ControlLink> bad;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = members_.find(id);
    if (it == members_.end()) return;
    Status s = fold(message, it->second);
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

void Membership::send(uint32_t id, const control::Message& message) {
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
