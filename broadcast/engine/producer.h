// The trainer's end of deltacast, with the coordinator inside it. publish()
// diffs the trainer's tensors against the shadow (the last published
// version), encodes the delta into buckets and queues it; a round thread
// broadcasts queued versions one after another, in order (publishing while a
// version is in flight queues: nothing is coalesced, so every consumer at
// version v-1 receives exactly the delta v). Consumers that hold nothing, an
// older version, another producer's version, or failed a version are caught
// up between rounds with a full (dense) sync of the newest version. Deltas
// with `ulp` values only go to consumers whose base is exactly the delta's
// base; everyone else gets the full sync.
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "broadcast/engine/group/group_seat.h"
#include "broadcast/engine/membership.h"
#include "broadcast/engine/metrics/metrics_exporter.h"
#include "broadcast/engine/plan/rate_book.h"
#include "broadcast/engine/relay.h"
#include "broadcast/engine/round.h"
#include "core/buffer_pool.h"
#include "sparse/delta_encoder.h"
#include "sparse/device_codec.h"
#include "sparse/version_select.h"
#include "sparse/model_image.h"
#include "core/trust/trust.h"

namespace deltacast {

struct ProducerOptions {
  Endpoint listen{"127.0.0.1", 0};  // control port
  trust::Trust trust;
  std::vector<Endpoint> rails;      // local address of each rail (ports ignored); empty: one rail, any address
  // The data transport: "tcp", "rdma" or "auto" (RDMA where a device is, TCP otherwise; a
  // request for RDMA where there is none falls back to TCP and says why). Every consumer of the
  // group must receive over the same one, or it is refused at join.
  std::string transport = "tcp";
  std::shared_ptr<Transport> transport_backend;  // given: used instead of `transport` (tests: the fake backend)
  CodecOptions codec;
  // Where consumers run in other sites and `codec` has no zstd stage: the zstd level a delta
  // version gets when that makes it cross the slowest WAN link sooner, by the link's measured
  // rate and zstd's ratio and speed on the version itself (wan_compression.h); 0: never.
  int wan_zstd_level = 1;
  // Tensors on a GPU: publish() diffs and encodes there, on this CUDA stream (a cudaStream_t as an
  // integer; 0: the default stream), so it reads the tensors as work queued before it on the
  // stream left them.
  uintptr_t cuda_stream = 0;
  // Tensors on a GPU: where the shadow they are diffed against lives: "device" (GPU memory, the
  // fastest diff) or "host" (pinned host memory the diff reads over PCIe: no HBM for it).
  std::string shadow = "device";
  RoundOptions round;
  ControlLinkOptions control;
  SprayOptions spray;
  std::string netns;                // open every socket in this network namespace (tests)
  uint64_t epoch = 0;               // 0: random
  // A trainer rank of a sharded group: the tensors are the rank's pieces, and the producer keeps
  // the rank registered with the group's coordinator (hosting it when `group->host`).
  std::optional<GroupSeatOptions> group;
  // Serve Prometheus metrics at http://metrics/metrics (port 0: any free one; docs/metrics.md).
  std::optional<Endpoint> metrics;
};

// One version's journey, filled in as it goes.
struct VersionReport {
  uint64_t version = 0;
  uint64_t base = 0;
  bool full = false;
  VersionStats stats;
  double encode_seconds = 0;  // diff + encode + bucket + blob
  double wan_rate = 0;        // bytes/s: the slowest WAN link as the zstd choice saw it (0: none measured)
  double queue_seconds = 0;   // waiting for earlier versions' rounds
  double wire_seconds = 0;    // round start until every target staged (received and verified) it
  double apply_seconds = 0;   // the slowest target's commit (apply)
  double seconds = 0;         // publish() called until every target committed
  std::map<std::string, double> staged_by;  // per target (by name): round start until it staged the version
  // Per target (by name): the bytes of the version sent to it (a resharded consumer is sent only
  // the chunks it holds elements of; everyone else the whole version).
  std::map<std::string, uint64_t> bytes_to;
  std::vector<std::string> slow;            // targets measured slow, placed at the tails (planner.h)
  uint32_t targets = 0;
  uint32_t committed = 0;
  uint32_t failed = 0;
  uint32_t lost = 0;
  // Per target that failed or was lost (by name; "#<id>" for one gone before its round began): why
  // it did not commit the version.
  std::map<std::string, std::string> why_not;
  uint32_t slice_bytes = 0;
  uint32_t stripes = 0;
  uint32_t fanout = 0;  // the shape it went out in (1: chains; k: trees k wide)
  uint32_t replans = 0;
  uint32_t standby_replans = 0;  // of those, made on the standby links' word (RoundResult)
  bool done = false;
};

struct CheckReport {
  struct Member {
    uint32_t id = 0;
    std::string name;
    bool answered = false;
    uint64_t held = 0;
    uint64_t hash = 0;
    bool exact = false;
  };
  uint64_t version = 0;
  uint64_t expected_hash = 0;
  std::vector<Member> members;
  bool all_exact() const;
};

struct ProducerStats {
  uint64_t epoch = 0;
  uint64_t version = 0;        // newest published
  uint64_t queued = 0;         // published, round not finished
  uint64_t full_syncs = 0;     // catch-up rounds run
  uint64_t wire_bytes = 0;     // bytes of every round's blob (once per round: relays carry the rest)
  // Published versions whose rounds ended, and over them: targets that committed, that failed
  // the version, and that were lost (left or died) during it.
  uint64_t versions_done = 0;
  uint64_t commits = 0;
  uint64_t failures = 0;
  uint64_t lost = 0;
  uint64_t last_done = 0;      // the newest version whose round ended (0: none)
  std::string transport;       // the data transport in use
  std::string protection;      // what this producer requires of every connection (trust::Protection's name)
  std::vector<MemberRecord> members;
  std::map<uint32_t, MemberRates> rates;  // what the rate book knows of each member
  // Per site of members away from the producer's: the WAN into it as last measured (RateBook::
  // wan_into), what a relay's new child there starts from.
  std::map<std::string, PathEstimate> wan_into;

  // The rate book's record of member `id` (empty when it knows nothing of it).
  MemberRates rates_of(uint32_t id) const {
    auto it = rates.find(id);
    return it == rates.end() ? MemberRates{} : it->second;
  }
};

class Producer {
 public:
  // `tensors`: the trainer's tensors, all in host memory or all on one GPU (then diffed against
  // a shadow in GPU memory and encoded there: only the encoded buckets cross to the host); read
  // by publish() only.
  static Result<std::unique_ptr<Producer>> create(Manifest manifest, std::vector<TensorView> tensors,
                                                  ProducerOptions options);
  ~Producer();
  Producer(const Producer&) = delete;
  Producer& operator=(const Producer&) = delete;

  Endpoint address() const { return membership_->address(); }
  uint64_t epoch() const { return membership_->epoch(); }
  std::string_view transport() const { return transport_->name(); }

  // Makes the next version from the tensors as they are now and queues it.
  // The first version, and any with `full`, is a full (dense) sync to every member.
  // `version`: its number, above every published one (a trainer rank of a sharded group numbers
  // versions by training step, so that a restarted rank goes on where the group is); 0: the next.
  Result<uint64_t> publish(bool full = false, uint64_t version = 0);
  // Until every live member committed `version` (or newer) and its round ended.
  Status wait(uint64_t version, Millis timeout);
  // Until at least `count` members joined.
  Status wait_members(size_t count, Millis timeout);
  // The hash of `version` as the producer published it (model_hash, core/hash.h: what a consumer
  // holding it reports); `version` must be the newest published one.
  Result<uint64_t> model_hash(uint64_t version);
  // Asks every member to hash its tensors and compares with the producer's
  // hash of `version`, which must be the newest published one. A member that
  // holds `version` with other bits is given a full sync.
  Result<CheckReport> check(uint64_t version, Millis timeout);

  // A rank of a sharded group: until its coordinator has it registered (a refusal, naming the
  // tensor or rank, is returned as soon as it comes). Outside a group: at once.
  Status wait_registered(Millis timeout);
  // The group coordinator this producer hosts, if it does.
  std::optional<Endpoint> group_coordinator() const;

  std::optional<VersionReport> report(uint64_t version) const;
  // How far the round in flight is (a version or a catch-up full sync): bytes arrived at its
  // targets, rate, time to go. None between rounds.
  std::optional<RoundProgress> progress() const;
  ProducerStats stats() const;
  // The producer's own rails to the members it feeds (by member id).
  std::map<uint32_t, std::vector<RailTelemetry>> rail_telemetry() const;
  // The members of other sites it keeps standby links to (as its own site's sentinel), and whether
  // each is heard.
  std::map<uint32_t, bool> standby_links() const;
  // Where its Prometheus metrics are served (ProducerOptions::metrics), if they are.
  std::optional<Endpoint> metrics_endpoint() const;
  void close();

 private:
  struct Blob;
  struct Pending;

  Producer(Manifest manifest, std::vector<TensorView> tensors, ProducerOptions options, DeltaEncoder encoder);
  void round_loop();
  bool needs_full_sync(const MemberRecord& m, const std::vector<uint64_t>& bases, uint64_t newest) const;
  std::shared_ptr<Blob> full_blob();
  Blob make_blob(const EncodedVersion& encoded);
  Blob make_image();  // of the shadow; shadow_mu_ held
  void tag_leaves(Blob& blob);  // authenticated: its leaf tags, on the hash pool
  // Tensors on a GPU: brings the host shadow (full syncs and checks read it) up to the GPU shadow.
  Status refresh_host_shadow();
  // The shadow held shared, with its host copy current.
  Result<std::shared_lock<std::shared_mutex>> read_fresh_shadow();
  EncodedVersion full_version_stats(uint64_t version) const;
  struct TargetClass;
  void run_pending(const std::shared_ptr<Pending>& pending);
  // Where chunks must be cut so that none is partly held by any of `members`.
  std::vector<std::vector<uint64_t>> member_cuts(const std::vector<MemberRecord>& members) const;
  // Cuts the encoder's chunks at the edges of what every member holds, if that changed.
  void recut_for_members(const std::vector<MemberRecord>& members);
  // The slowest WAN link into a site of `members` (bytes/s; 0: none in another site, none
  // measured, or no zstd choice asked for): the rate book's slowest link across sites, and each
  // member away from the producer's site as it received the last version it staged in that
  // version's round with kWanSampleBytes or more sent to it (a relay reports its links when it
  // stages, before a slow WAN child has taken enough to measure).
  double wan_rate(const std::vector<MemberRecord>& members) const;
  static constexpr uint64_t kWanSampleBytes = 4 << 20;
  // The zstd stage a delta version gets for a WAN of `wan_rate` (ProducerOptions::wan_zstd_level),
  // chosen on its own chunks; none where the rate is 0.
  ZstdChoice zstd_for_wan(double wan_rate) const;
  // `members` grouped by what they hold (`routed` false: one class, every member, the whole version).
  std::vector<TargetClass> classes_of(const std::vector<MemberRecord>& members, bool routed) const;
  // The chunks of `version` that `held` holds elements of, as a blob (empty on failure).
  Blob selected(const EncodedVersion& version, const HeldRanges& held);
  // A full version's image encoded as dense chunks, cut where the members' holdings end.
  std::shared_ptr<const EncodedVersion> full_chunks(const Blob& image);
  // One round per class from `spec`: members holding everything get `whole`, every other class
  // the chunks of `chunks()` (made once, when a class needs them) it holds; the results merged.
  RoundResult run_classes(RoundSpec spec, const std::vector<TargetClass>& classes, const Blob& whole,
                          const std::function<std::shared_ptr<const EncodedVersion>()>& chunks,
                          std::map<std::string, uint64_t>& bytes_to, uint64_t& sent);
  void run_catch_up();
  uint64_t next_transfer();
  std::vector<uint64_t> queued_bases() const;

  Manifest manifest_;
  std::vector<TensorView> tensors_;
  ProducerOptions options_;
  DeltaEncoder encoder_;
  std::unique_ptr<DeviceEncoder> device_encoder_;  // tensors on a GPU: the shadow publish diffs against is there
  std::vector<std::vector<uint64_t>> cuts_;  // where encoder_ cuts chunks besides every chunk_bytes
  std::unique_ptr<ThreadPool> hash_pool_;
  ModelImage image_;
  std::shared_ptr<Transport> transport_;
  RateBook rates_;
  std::unique_ptr<Membership> membership_;
  std::unique_ptr<Relay> relay_;
  std::unique_ptr<RoundDriver> driver_;
  std::unique_ptr<GroupSeat> seat_;  // a sharded group's rank

  std::mutex publish_mu_;               // one publish at a time
  mutable std::shared_mutex shadow_mu_;  // publish writes the shadow; full syncs and checks read it
  Shadow shadow_;                        // version 0 until the first publish
  bool host_shadow_stale_ = false;       // (shadow_mu_) tensors on a GPU: deltas since shadow_'s bytes were copied
  std::mutex full_cache_mu_;
  std::shared_ptr<Blob> full_cache_;
  BufferPool blob_pool_{3};
  std::map<uint64_t, uint64_t> model_hashes_;  // of the shadow, per version (computed on demand)

  mutable std::mutex mu_;
  // Members away from the producer's site: how fast each received its last version of
  // kWanSampleBytes or more (wan_rate).
  mutable std::map<uint32_t, double> wan_receive_rates_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Pending>> queue_;
  std::atomic<size_t> queued_{0};
  std::map<uint64_t, VersionReport> reports_;
  uint64_t newest_ = 0;
  uint64_t full_syncs_ = 0;
  uint64_t wire_bytes_ = 0;
  uint64_t versions_done_ = 0, commits_ = 0, failures_ = 0, lost_ = 0, last_done_ = 0;
  std::unique_ptr<MetricsExporter> metrics_;
  uint64_t transfers_ = 0;
  std::atomic<bool> closing_{false};
  std::thread rounds_;
};

}  // namespace deltacast
