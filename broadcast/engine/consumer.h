// A rollout process's end of deltacast: joins the coordinator (token and
// manifest checked there), receives each version's slices into staging while
// forwarding them to its children (cut-through), verifies the whole version,
// and only then commits it: applies every bucket into the live tensors in one
// pass under an exclusive lock, so a reader never sees a mix of versions.
// When the producer goes away the tensors keep the last committed version,
// the error is reported, and the consumer rejoins when a producer returns.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "broadcast/engine/control/control_link.h"
#include "broadcast/engine/metrics/metrics_exporter.h"
#include "broadcast/engine/relay.h"
#include "broadcast/transport/staging.h"
#include "broadcast/transport/transport.h"
#include "core/buffer_pool.h"
#include "core/held_ranges.h"
#include "core/manifest.h"
#include "sparse/delta_applier.h"
#include "sparse/device_codec.h"
#include "sparse/model_image.h"
#include "core/trust/trust.h"

namespace deltacast {

struct ConsumerOptions {
  std::vector<Endpoint> coordinators;  // the producer's control address(es), tried in turn
  trust::Trust trust;
  std::vector<Endpoint> rails;      // this consumer's data address per rail (port 0: any free port)
  // The data transport: "tcp", "rdma" or "auto", as the producer's (ProducerOptions::transport).
  std::string transport = "tcp";
  std::shared_ptr<Transport> transport_backend;  // given: used instead of `transport` (tests: the fake backend)
  std::string name;
  // The host this consumer runs on (empty: the host name). Consumers of one node take each
  // version over the node's rails once: the planner chains them one after another, so all but
  // the first take each stripe from a neighbour on the same host (local traffic, not the NICs).
  std::string node;
  // The site (datacenter, region) it runs in; empty: the producer's. Each version crosses into a
  // site once, over its WAN link, and fans out inside it.
  std::string site;
  unsigned threads = 0;             // verify/apply threads (0: all cores)
  // Tensors on a GPU: commits verify and apply there, on this CUDA stream (a cudaStream_t as an
  // integer; 0: the default stream), and a commit ends only once its work completed on the
  // device: when pull() returns or on_commit(v) runs, work queued on the stream sees v whole.
  uintptr_t cuda_stream = 0;
  bool auto_commit = true;          // commit as soon as a version is verified; false: only in pull()
  // A resharded consumer: the producer's tensors (a trainer rank's pieces) as this process holds
  // them, Layout::compose(rank, view) (core/layout.h). `tensors` then match layout->local_specs(),
  // not the manifest, and every version is written through it. Null: the tensors are the manifest's.
  std::shared_ptr<const Layout> layout;
  // Called (on the verifying thread) with each version once it is verified and waiting to be
  // committed; a group of consumers commits a version only when every one of them holds it.
  std::function<void(uint64_t version)> on_staged;
  // Asked for the producer's address(es) again once every known one failed (a trainer rank of a
  // sharded group that restarted elsewhere: the group coordinator knows where); empty: keep them.
  std::function<std::vector<Endpoint>()> rediscover;
  Millis reconnect_min{100};
  Millis reconnect_max{2000};
  ControlLinkOptions control;
  SprayOptions spray;
  std::string netns;                // open every socket in this network namespace (tests)
  // Serve Prometheus metrics at http://metrics/metrics (port 0: any free one; docs/metrics.md).
  std::optional<Endpoint> metrics;
};

struct ConsumerState {
  uint32_t id = 0;
  uint64_t epoch = 0;       // of the producer joined last
  uint64_t version = 0;     // committed; 0: nothing yet
  uint64_t held_epoch = 0;  // of the producer that sent `version` (a new producer numbers its versions afresh)
  bool connected = false;
  std::string protection;  // what its control link runs (the mode both ends agreed on; empty: never joined)
  bool refused = false;   // the coordinator refused this consumer for good
  Status last_error;
  // Since start: versions received and verified, committed, and failed (not received, not
  // verified, or not applied), and the bytes of those received.
  uint64_t staged = 0;
  uint64_t commits = 0;
  uint64_t failures = 0;
  uint64_t received_bytes = 0;
  double last_receive_seconds = 0;  // the newest staged version: its first slice until all verified
  double last_apply_seconds = 0;    // the newest commit
};

class Consumer {
 public:
  using OnCommit = std::function<void(uint64_t version)>;

  // `tensors` match `manifest`, all in host memory or all on one GPU (verified and applied there
  // at commit: a version that does not verify is never written); they are written only by commits.
  static Result<std::unique_ptr<Consumer>> create(Manifest manifest, std::vector<TensorView> tensors,
                                                  ConsumerOptions options);
  ~Consumer();

  // Starts the background work and waits until joined, refused (wrong token,
  // manifest mismatch: returned as errors) or `timeout` passed (it keeps trying).
  Status start(Millis timeout, OnCommit on_commit = nullptr);
  // Commits every version verified so far, newest last; first waits up to
  // `timeout` for one newer than the committed version. Returns the version held.
  Result<uint64_t> pull(Millis timeout);
  // Commits the verified versions up to and including `version` (none newer), oldest first.
  Status commit_through(uint64_t version);
  // The verified versions waiting to be committed, oldest first.
  std::vector<uint64_t> staged_versions() const;
  // Switches between committing each version as soon as it is verified (on)
  // and committing only in pull() (off); switching on commits what is ready.
  Status set_auto_commit(bool on);
  // Waits until `version` (or newer) is committed.
  Status wait_version(uint64_t version, Millis timeout);

  ConsumerState state() const;
  // Hash of the tensors as they are now (model_hash, core/hash.h).
  uint64_t model_hash_now();
  // What this consumer holds, read with no commit in between: the version, its producer's epoch
  // and the tensors' hash. Not from inside on_commit (commits are serialized with it; there,
  // state() and model_hash_now() already agree).
  struct HeldModel {
    uint64_t epoch = 0;
    uint64_t version = 0;
    uint64_t hash = 0;
  };
  HeldModel held_model();
  uint64_t version() const;
  // Readers of the tensors hold this shared; commits hold it exclusively.
  std::shared_mutex& tensors_mutex() { return tensors_mu_; }
  std::vector<Endpoint> data_endpoints() const { return listener_->endpoints(); }
  std::string_view transport() const { return transport_->name(); }
  // What this consumer requires of every connection.
  trust::Protection protection() const { return options_.trust.protection; }
  // Its relay's rails to each child it forwards to (by member id).
  std::map<uint32_t, std::vector<RailTelemetry>> rail_telemetry() const { return relay_.telemetry_by_child(); }
  // The members of other sites it keeps standby links to (as their site's sentinel), and whether
  // each is heard.
  std::map<uint32_t, bool> standby_links() const { return relay_.watched(); }
  // Where its Prometheus metrics are served (ConsumerOptions::metrics), if they are.
  std::optional<Endpoint> metrics_endpoint() const;
  void close();

 private:
  struct Incoming;
  struct Staged;

  Consumer(Manifest manifest, std::vector<TensorView> tensors, ConsumerOptions options,
           std::shared_ptr<Transport> transport);
  void connect_loop();
  Status join(int fd);
  void on_message(const control::Message& message);
  void on_version(const control::Announce& message);
  void on_replan(const control::Replan& message);
  void on_done(const control::Done& message);
  void on_check(const control::Check& message);
  void worker_loop();
  void answer_checks();
  // Tells the coordinator of children of the transfer in flight that went silent (the relay's
  // unreachable_children), once each.
  void report_unreachable_children();
  // Tells the coordinator which members on its standby links it hears on no rail, each time that
  // set changes (control::Unheard).
  void report_unheard_peers();
  // Tells the coordinator how the links to the children still receiving when this member staged
  // (or given to it since) did, once they have what they get from here (control::Forwarded; the
  // Staged message's samples of them stopped where this member had the version).
  void report_forwarded_links();
  void progress_loop();
  Status commit_ready(uint64_t through = UINT64_MAX);
  void abandon_incoming();
  void send(const control::Message& message);
  // Counts a version this consumer failed and tells the producer why.
  void fail_version(uint64_t version, const std::string& why);
  // Writes a staged version into the tensors (tensors_mu_ held exclusively).
  Status write_version(const Staged& staged);
  uint64_t tensors_hash();  // tensors_mu_ held

  Manifest manifest_;
  std::vector<TensorView> tensors_;
  ConsumerOptions options_;
  std::shared_ptr<Transport> transport_;
  DeltaApplier applier_;
  std::unique_ptr<DeviceApplier> device_applier_;  // tensors on a GPU: verify and apply there
  HeldRanges held_;  // what options_.layout holds of the producer's tensors (resharded consumers)
  std::unique_ptr<ThreadPool> hash_pool_;
  ModelImage image_;            // the layout full versions arrive in
  BufferPool staging_pool_{2};  // staging memory, reused across versions
  StagingArea staging_;
  std::unique_ptr<Listener> listener_;
  Relay relay_;
  std::shared_mutex tensors_mu_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  ConsumerState state_;
  OnCommit on_commit_;
  std::unique_ptr<ControlLink> link_;
  std::shared_ptr<Incoming> incoming_;
  std::deque<std::shared_ptr<Staged>> ready_;
  std::vector<uint64_t> check_requests_;
  // Worker thread only: the transfer reported_unreachable_ and reported_unheard_children_ are of.
  uint64_t reported_transfer_ = 0;
  std::set<uint32_t> reported_unreachable_, reported_unheard_children_;
  std::vector<uint32_t> reported_unheard_;  // worker thread only: as last sent (report_unheard_peers)
  uint64_t joins_ = 0;          // control connections made (mu_)
  uint64_t reported_joins_ = 0;  // worker thread only: joins_ when reported_unheard_ was last checked
  struct ForwardedLinks {
    uint64_t epoch = 0;           // of the producer the version is from
    uint64_t version = 0;
    uint64_t transfer = 0;        // 0: no staged version to report on
    std::set<uint32_t> reported;  // children whose whole link was reported (staged, or forwarded)
  };
  ForwardedLinks forwarded_;  // worker thread only
  std::mutex commit_mu_;  // one commit at a time
  bool joined_once_ = false;
  std::atomic<bool> closing_{false};
  std::atomic<bool> auto_commit_{true};
  std::thread connector_;
  std::thread worker_;
  std::thread progress_;
  std::unique_ptr<MetricsExporter> metrics_;
};

}  // namespace deltacast
