// Who is in: the coordinator's table of consumers. It listens on the control
// port, admits a consumer only with the right protocol, token, manifest (a
// mismatch is refused naming the first differing tensor) and data transport,
// keeps one control link per member, and folds every message a member sends
// (progress, staged, committed, failed, checked) into that member's record;
// the link reports in `staged` go on to the rate book, which alone judges
// speed (rate_book.h). Members come and go at any time; whoever waits on the
// table (the producer's round loop) is woken on every change.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "broadcast/engine/control/control_link.h"
#include "broadcast/engine/plan/rate_book.h"
#include "broadcast/transport/rail.h"
#include "core/held_ranges.h"
#include "core/manifest.h"
#include "core/trust/trust.h"

namespace deltacast {

struct MembershipOptions {
  Endpoint listen{"127.0.0.1", 0};
  trust::Trust trust;
  uint64_t epoch = 0;  // this producer instance; consumers holding another epoch's version get a full sync
  std::string transport = "tcp";  // the group's data transport: a member using another is refused
  std::string netns;
  ControlLinkOptions control;
  Millis join_timeout{5000};
  uint32_t max_members = 1024;
  RateBook* rates = nullptr;  // where link reports go (may be null: nobody judges speed)
};

// What the coordinator knows about one member.
struct MemberRecord {
  uint32_t id = 0;
  std::string name;
  std::string node;        // the host it runs on (empty: a node of its own)
  std::string site;        // the site it runs in (empty: the producer's)
  std::string peer;        // control connection's remote address
  std::string protection;  // what its control link runs (the mode both ends agreed on)
  PeerEndpoints rails;     // data endpoints, one per rail
  bool defers_commit = false;  // a sharded group's member: a round is done with it once it staged the version
  std::shared_ptr<const HeldRanges> held;  // what it holds of the producer's tensors; null: everything
  bool alive = true;
  uint64_t base = 0;       // newest version of this epoch it holds staged or committed (0: none usable)
  uint64_t committed = 0;  // newest version of this epoch it committed
  Status last_failure;     // why its last version failed, if it did
  uint64_t failed_version = 0;
  // Progress on the transfer in flight (as last reported).
  uint64_t transfer = 0;
  uint32_t arrived = 0;
  std::string have;             // slice bitmap, hex (control_message.h)
  // Children it reported it cannot reach over any rail in transfer `unreachable_transfer`, and
  // those it only heard on no rail for a little while (control::Unreachable::early).
  uint64_t unreachable_transfer = 0;
  std::set<uint32_t> unreachable;
  std::set<uint32_t> unheard_children;
  // The members it keeps a standby link to that it last said it no longer hears (control::Unheard),
  // each with when it first said so.
  std::map<uint32_t, std::chrono::steady_clock::time_point> unheard;
  double apply_seconds = 0;     // of its last commit
  double receive_seconds = 0;   // of its last staged version
  // Answers to check requests: version held and hash of its tensors.
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> checks;

  // Whether it runs in another site than a producer in `producer_site`: behind a WAN link.
  bool away_from(const std::string& producer_site) const { return !site.empty() && site != producer_site; }
};

class Membership {
 public:
  static Result<std::unique_ptr<Membership>> create(Manifest manifest, MembershipOptions options);
  ~Membership();
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  Endpoint address() const { return address_; }
  uint64_t epoch() const { return options_.epoch; }

  // A copy of every member record (dead ones are dropped once noticed).
  std::vector<MemberRecord> snapshot() const;
  std::optional<MemberRecord> member(uint32_t id) const;

  // Sends to one member; a member that cannot be reached is dropped.
  void send(uint32_t id, const control::Message& message);

  // Waits until `ready()` (called under the table's lock with the records) or `timeout`.
  bool wait(Millis timeout, const std::function<bool(const std::map<uint32_t, MemberRecord>&)>& ready);
  // Runs `fn` on the records under the table's lock.
  void update(const std::function<void(std::map<uint32_t, MemberRecord>&)>& fn);
  // Bumps the change counter and wakes waiters (e.g. after a version was queued).
  void notify();
  uint64_t changes() const;

  // Drops every member and stops listening.
  void close();

 private:
  Membership(Manifest manifest, MembershipOptions options) : manifest_(std::move(manifest)), options_(std::move(options)) {}
  void accept_loop();
  void admit(int fd);
  Status check_join(const control::Join& join) const;
  Status fold(const control::Message& message, MemberRecord& record);
  void on_message(uint32_t id, const control::Message& message);
  void on_close(uint32_t id, const Status& why);
  void reap();

  Manifest manifest_;
  MembershipOptions options_;
  Endpoint address_;
  int listen_fd_ = -1;
  std::atomic<bool> closed_{false};
  std::thread acceptor_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t changes_ = 0;
  uint32_t next_id_ = 1;
  std::map<uint32_t, MemberRecord> members_;
  std::map<uint32_t, std::shared_ptr<ControlLink>> links_;
  std::vector<std::shared_ptr<ControlLink>> dead_links_;  // closed from their own thread; destroyed later
  struct Joiner {
    std::thread thread;
    std::atomic<bool> done{false};
  };
  std::list<std::unique_ptr<Joiner>> joiners_;  // consumers being admitted, one thread each
};

}  // namespace deltacast
