// The two sides that talk to a sharded group's coordinator
// (group_coordinator.h): a trainer rank keeps itself registered, a rollout
// process finds the formed group. Both go on trying while the coordinator
// cannot be reached or the group is still forming, and stop at a refusal
// that asking again cannot change (a wrong token, pieces that overlap
// another rank's, tensors that differ from the group's), returning it.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "broadcast/engine/control/control_messages.h"
#include "broadcast/transport/transport.h"
#include "core/trust/trust.h"

namespace deltacast {

struct GroupClientOptions {
  std::vector<Endpoint> coordinators;  // the coordinator's address(es), tried in turn
  trust::Trust trust;
  std::string netns;                   // connect from this network namespace (tests)
  Millis request_timeout{2000};        // one request: connect, ask, answer
};

// Asks once: the coordinator's answer (a reject too), or why none came.
Result<control::Message> ask_coordinator(const Endpoint& coordinator, const control::Message& request,
                                         const GroupClientOptions& options);

// The formed group, asking every `retry` until `timeout` passes while the coordinator is
// unreachable or ranks are missing (the last reason is returned then).
Result<GroupView> find_group(const GroupClientOptions& options, Millis timeout, Millis retry = Millis(200));

// Keeps one trainer rank registered: registers it at once, then again every `every` (a
// coordinator that restarted learns the rank again; a rank that restarted at a new address is
// found there). A final refusal stops it; wait() returns it.
class RankRegistration {
 public:
  RankRegistration(GroupClientOptions options, control::Register request, Millis every = Millis(2000));
  ~RankRegistration();
  RankRegistration(const RankRegistration&) = delete;
  RankRegistration& operator=(const RankRegistration&) = delete;

  // Until the rank is registered once, it was refused for good, or `timeout` passed
  // (kDeadlineExceeded, with the last reason it was not registered).
  Status wait(Millis timeout);
  void stop();

 private:
  void loop();

  GroupClientOptions options_;
  control::Register request_;
  Millis every_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool registered_ = false;
  bool stopping_ = false;
  Status refused_;     // a final refusal
  Status last_error_;  // why the last attempt did not register
  std::thread thread_;
};

}  // namespace deltacast
