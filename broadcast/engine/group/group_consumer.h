// A rollout process of a sharded group. The group shares logical tensors
// (core/layout.h); each trainer rank owns pieces of them and publishes those
// through a Producer of its own, numbering versions by training step. This
// process holds tensors of its own layout (a TP rank's fused qkv_proj, column
// shards, ...). It runs one Consumer per rank whose pieces it holds any of,
// each writing the rank's versions through the composition of the rank's
// layout with this process's, and commits version v only when every one of
// them holds v verified, all of them under one exclusive lock: a reader never
// sees ranks at different versions, and a rank that dies mid-version leaves
// the process at v-1 until it is back.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "broadcast/engine/consumer.h"
#include "core/layout.h"

namespace deltacast {

// One trainer rank as a consumer sees it: what it owns and where its producer listens.
struct GroupRank {
  std::vector<LocalTensorSpec> pieces;
  std::vector<Endpoint> coordinators;
  // Where the rank is now, once every address above failed (ConsumerOptions::rediscover).
  std::function<std::vector<Endpoint>()> rediscover;
};

struct GroupConsumerState {
  uint64_t version = 0;       // committed by the group: every needed rank holds it
  std::vector<uint32_t> ranks;  // the ranks this process takes pieces from
  std::vector<uint64_t> rank_versions;  // committed per such rank (all equal to `version` between commits)
  uint64_t received_bytes = 0;          // since start, over every rank's consumer
  std::vector<std::string> protections;  // what each rank's control link runs (empty: not joined yet)
  Status last_error;
};

class GroupConsumer {
 public:
  // `logical`: the group's tensors; `layout`: this process's tensors as views of them, which
  // `tensors` (host memory) match; `ranks`: every rank of the group, whose pieces must tile the
  // logical tensors once. `options` serves every rank's consumer: rails with port 0 (each opens
  // its own ports), name suffixed with the rank, auto_commit ignored (the group commits).
  // Errors name the tensor or the rank.
  static Result<std::unique_ptr<GroupConsumer>> create(const std::vector<TensorSpec>& logical,
                                                       std::vector<LocalTensorSpec> layout,
                                                       std::vector<TensorView> tensors, std::vector<GroupRank> ranks,
                                                       ConsumerOptions options);
  // The same, with the group as its coordinator (group_coordinator.h) at `coordinator` tells it:
  // asks for it (waiting up to `timeout` while ranks are still missing), and has each rank's
  // consumer ask again where its rank is when it loses it. `logical`, when given, must be the
  // group's tensors (the first difference is named).
  static Result<std::unique_ptr<GroupConsumer>> find(std::vector<Endpoint> coordinator,
                                                     std::vector<LocalTensorSpec> layout,
                                                     std::vector<TensorView> tensors, ConsumerOptions options,
                                                     Millis timeout, const std::vector<TensorSpec>* logical = nullptr);
  ~GroupConsumer();

  // Joins every needed rank's producer; waits up to `timeout` for all of them (a refusal is an error).
  Status start(Millis timeout);
  Status wait_version(uint64_t version, Millis timeout);
  // Commits no version above `through` until it is raised again. By default every version is
  // committed as soon as every rank's part of it is verified (through = UINT64_MAX); an
  // inference engine that must see new weights only when it asks sets 0 first, then the version
  // it wants, and that version lands (a newer one already staged waits).
  void set_commit_limit(uint64_t through);
  // Whether `version` is held or could be committed now: every rank's part of it staged and
  // verified (whatever the commit limit). An engine that must apply a version on several workers
  // at once asks each whether it is ready before letting any of them write.
  bool staged(uint64_t version) const;
  uint64_t version() const;
  GroupConsumerState state() const;
  // The data transport in use (every rank's consumer uses the same).
  std::string_view transport() const { return consumers_.front()->transport(); }
  // This process's tensors as resolved (names, dtypes, shapes).
  const std::vector<TensorSpec>& local_specs() const { return view_.local_specs(); }
  // Readers hold this shared; group commits hold it exclusively.
  std::shared_mutex& tensors_mutex() { return tensors_mu_; }
  void close();

 private:
  GroupConsumer(Layout view, std::vector<TensorView> tensors);
  void commit_loop();
  // Commits the consumers `which` through version `through`, all under the exclusive tensors lock
  // (`lock`, on mu_, released meanwhile); the first failure, naming its rank.
  Status commit_parts(std::unique_lock<std::mutex>& lock, const std::vector<size_t>& which, uint64_t through);
  // The newest version above the committed one that every rank's consumer holds verified (or
  // committed); 0: none.
  uint64_t committable() const;

  Layout view_;
  std::vector<TensorView> tensors_;
  std::vector<uint32_t> rank_ids_;
  std::vector<std::unique_ptr<Consumer>> consumers_;  // one per needed rank, as rank_ids_
  std::shared_mutex tensors_mu_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t version_ = 0;
  uint64_t commit_limit_ = UINT64_MAX;
  Status last_error_;
  bool closing_ = false;
  std::thread committer_;
};

}  // namespace deltacast
