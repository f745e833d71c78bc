#include "broadcast/engine/group/group_consumer.h"

#include <algorithm>

#include "broadcast/engine/group/group_client.h"
#include "core/log.h"

namespace deltacast {

Result<std::unique_ptr<GroupConsumer>> GroupConsumer::create(const std::vector<TensorSpec>& logical,
                                                             std::vector<LocalTensorSpec> layout,
                                                             std::vector<TensorView> tensors,
                                                             std::vector<GroupRank> ranks, ConsumerOptions options) {
  if (ranks.empty()) return invalid_argument("a group needs at least one trainer rank");
  for (const Endpoint& rail : options.rails) {
    if (rail.port != 0) {
      return invalid_argument("rail {}: a group consumer opens ports for every rank it takes pieces from; give port 0",
                              rail.to_string());
    }
  }
  DC_ASSIGN_OR_RETURN(Layout view, Layout::resolve(logical, std::move(layout)));
  DC_ASSIGN_OR_RETURN(const Manifest local, Manifest::create(view.local_specs()));
  DC_RETURN_IF_ERROR(local.check_views(tensors));
  std::vector<Layout> owners;
  for (size_t r = 0; r < ranks.size(); ++r) {
    auto owner = Layout::resolve(logical, ranks[r].pieces);
    if (!owner.ok()) return owner.status().with_context(fmt::format("rank {}", r));
    owners.push_back(std::move(owner).value());
  }
  DC_RETURN_IF_ERROR(check_tiling(logical, owners));

  std::unique_ptr<GroupConsumer> g(new GroupConsumer(std::move(view), std::move(tensors)));
  for (uint32_t r = 0; r < ranks.size(); ++r) {
    DC_ASSIGN_OR_RETURN(Layout route, Layout::compose(owners[r], g->view_));
    if (route.runs().empty()) continue;  // nothing of this rank is held here
    if (ranks[r].coordinators.empty()) return invalid_argument("rank {}: no producer address", r);
    DC_ASSIGN_OR_RETURN(Manifest manifest, Manifest::create(owners[r].local_specs()));
    ConsumerOptions o = options;
    o.coordinators = ranks[r].coordinators;
    o.name = fmt::format("{}.r{}", options.name.empty() ? "consumer" : options.name, r);
    o.auto_commit = false;
    o.layout = std::make_shared<const Layout>(std::move(route));
    o.rediscover = ranks[r].rediscover;
    GroupConsumer* self = g.get();
    o.on_staged = [self](uint64_t) {
      std::lock_guard<std::mutex> lock(self->mu_);
      self->cv_.notify_all();
    };
    auto consumer = Consumer::create(std::move(manifest), g->tensors_, std::move(o));
    if (!consumer.ok()) return consumer.status().with_context(fmt::format("rank {}", r));
    g->rank_ids_.push_back(r);
    g->consumers_.push_back(std::move(consumer).value());
  }
  if (g->consumers_.empty()) return invalid_argument("this process's tensors hold nothing any rank owns");
  return g;
}

Result<std::unique_ptr<GroupConsumer>> GroupConsumer::find(std::vector<Endpoint> coordinator,
                                                           std::vector<LocalTensorSpec> layout,
                                                           std::vector<TensorView> tensors, ConsumerOptions options,
                                                           Millis timeout, const std::vector<TensorSpec>* logical) {
  GroupClientOptions client;
  client.coordinators = std::move(coordinator);
  client.trust = options.trust;
  client.netns = options.netns;
  DC_ASSIGN_OR_RETURN(GroupView group, find_group(client, timeout));
  if (logical != nullptr && *logical != group.logical) {
    return mismatch("the group's tensors are not the ones given: {} (given vs group)",
                    first_difference(*logical, group.logical));
  }
  std::vector<GroupRank> ranks;
  GroupClientOptions quick = client;
  quick.request_timeout = Millis(500);  // asked on a rank consumer's reconnect thread, which close() joins
  for (RankEntry& entry : group.ranks) {
    const uint32_t r = entry.rank;
    ranks.push_back({std::move(entry.pieces), std::move(entry.addresses), [quick, r] {
                       auto now = find_group(quick, Millis(500));
                       return now.ok() && r < now->ranks.size() ? now->ranks[r].addresses : std::vector<Endpoint>{};
                     }});
  }
  return create(group.logical, std::move(layout), std::move(tensors), std::move(ranks), std::move(options));
}

GroupConsumer::GroupConsumer(Layout view, std::vector<TensorView> tensors)
    : view_(std::move(view)), tensors_(std::move(tensors)) {}

GroupConsumer::~GroupConsumer() { close(); }

Status GroupConsumer::start(Millis timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  committer_ = std::thread([this] { commit_loop(); });
  for (size_t i = 0; i < consumers_.size(); ++i) {
    const auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    Status s = consumers_[i]->start(std::max(left, Millis(0)));
    if (!s.ok()) return s.with_context(fmt::format("rank {}", rank_ids_[i]));
  }
  return Status();
}

bool GroupConsumer::staged(uint64_t v) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (version_ >= v) return true;
  return std::all_of(consumers_.begin(), consumers_.end(), [&](const auto& c) {
    const auto held = c->staged_versions();
    return c->version() == v || std::find(held.begin(), held.end(), v) != held.end();
  });
}

uint64_t GroupConsumer::committable() const {
  uint64_t best = 0;
  // Candidates: what the first rank's consumer holds verified; each must be held by all.
  for (uint64_t v : consumers_[0]->staged_versions()) {
    if (v <= version_ || v > commit_limit_) continue;
    const bool everywhere = std::all_of(consumers_.begin(), consumers_.end(), [&](const auto& c) {
      const auto staged = c->staged_versions();
      return c->version() == v || std::find(staged.begin(), staged.end(), v) != staged.end();
    });
    if (everywhere) best = std::max(best, v);
  }
  return best;
}

Status GroupConsumer::commit_parts(std::unique_lock<std::mutex>& lock, const std::vector<size_t>& which,
                                   uint64_t through) {
  lock.unlock();
  Status failed;
  {
    // Every part lands under one exclusive lock: no reader sees a mix of versions.
    std::unique_lock<std::shared_mutex> exclusive(tensors_mu_);
    for (size_t i : which) {
      Status s = consumers_[i]->commit_through(through);
      if (!s.ok() && failed.ok()) failed = s.with_context(fmt::format("rank {}", rank_ids_[i]));
    }
  }
  lock.lock();
  return failed;
}

void GroupConsumer::commit_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!closing_) {
    cv_.wait_for(lock, Millis(50));
    if (closing_) break;
    // A rank that came back sends again the version the group holds (its new producer knows
    // nothing of what was committed): that part is committed again at once (it is the rank's
    // version, bit for bit), so that the rank sees its commit and goes on.
    std::vector<size_t> again;
    for (size_t i = 0; i < consumers_.size(); ++i) {
      const auto staged = consumers_[i]->staged_versions();
      if (!staged.empty() && staged.front() <= version_) again.push_back(i);
    }
    if (const uint64_t held = version_; !again.empty()) {
      if (Status s = commit_parts(lock, again, held); !s.ok()) {
        log().error("group consumer: version {} again: {}", held, s.to_string());
      }
    }
    const uint64_t v = committable();
    if (v == 0) continue;
    std::vector<size_t> all(consumers_.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    const Status failed = commit_parts(lock, all, v);
    if (failed.ok()) {
      version_ = v;
    } else {
      last_error_ = failed;
      log().error("group consumer: version {}: {}", v, failed.to_string());
    }
    cv_.notify_all();
  }
}

void GroupConsumer::set_commit_limit(uint64_t through) {
  std::lock_guard<std::mutex> lock(mu_);
  commit_limit_ = through;
  cv_.notify_all();
}

Status GroupConsumer::wait_version(uint64_t version, Millis timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (cv_.wait_for(lock, timeout, [&] { return closing_ || version_ >= version; }) && version_ >= version) {
    return Status();
  }
  std::string ranks;
  for (size_t i = 0; i < consumers_.size(); ++i) {
    ranks += fmt::format("{}rank {} at {}", i == 0 ? "" : ", ", rank_ids_[i], consumers_[i]->version());
  }
  return deadline_exceeded("version {} not committed by the group within {} ms (holding {}; {})", version,
                           timeout.count(), version_, ranks);
}

uint64_t GroupConsumer::version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return version_;
}

GroupConsumerState GroupConsumer::state() const {
  GroupConsumerState s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.version = version_;
    s.last_error = last_error_;
  }
  s.ranks = rank_ids_;
  for (const auto& c : consumers_) {
    const ConsumerState part = c->state();
    s.rank_versions.push_back(part.version);
    s.received_bytes += part.received_bytes;
    s.protections.push_back(part.protection);
    if (s.last_error.ok()) s.last_error = part.last_error;
  }
  return s;
}

void GroupConsumer::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_) return;
    closing_ = true;
    cv_.notify_all();
  }
  if (committer_.joinable()) committer_.join();
  for (auto& c : consumers_) c->close();
}

}  // namespace deltacast
