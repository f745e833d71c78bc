// The coordinator of a sharded group, on the network: trainer ranks register
// with it (their pieces and their producers' control addresses), rollout
// processes ask it for the formed group before they join the ranks. It runs
// inside rank 0's producer by default (ProducerOptions::group) or on its own
// (`deltacast-bench coordinator`). Each connection carries one request and
// its answer (control_messages.h: register / registered, find_group / group,
// reject); the group itself is a GroupDirectory, so every refusal names the
// rank or the tensor. The coordinator keeps no state worth saving: ranks
// register again every few seconds (group_client.h), so a coordinator that
// restarts knows the group again as soon as every rank has been back.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "broadcast/engine/control/control_messages.h"
#include "broadcast/engine/group/group_directory.h"
#include "broadcast/transport/transport.h"
#include "core/trust/trust.h"

namespace deltacast {

struct GroupCoordinatorOptions {
  Endpoint listen{"127.0.0.1", 0};
  trust::Trust trust;             // ranks and rollout processes must present it
  std::string netns;              // listen in this network namespace (tests)
  // How long one request may take to arrive once connected; requests are answered one at a
  // time, so this bounds what a silent peer costs everyone else.
  Millis request_timeout{1000};
};

class GroupCoordinator {
 public:
  // `logical`: the group's tensors (empty: the first rank to register says); `world`: its ranks.
  static Result<std::unique_ptr<GroupCoordinator>> create(std::vector<TensorSpec> logical, uint32_t world,
                                                          GroupCoordinatorOptions options);
  ~GroupCoordinator();
  GroupCoordinator(const GroupCoordinator&) = delete;
  GroupCoordinator& operator=(const GroupCoordinator&) = delete;

  Endpoint address() const { return address_; }
  const GroupDirectory& directory() const { return *directory_; }
  // Registers a rank of this process (the rank hosting the coordinator) without the network.
  Status register_here(RankEntry entry, const std::vector<TensorSpec>& logical);
  void close();

 private:
  GroupCoordinator(std::unique_ptr<GroupDirectory> directory, GroupCoordinatorOptions options);
  void serve_loop();
  void answer(int fd);
  control::Message handle(const control::Message& request, const std::string& peer);

  std::unique_ptr<GroupDirectory> directory_;
  GroupCoordinatorOptions options_;
  Endpoint address_;
  int listen_fd_ = -1;
  std::atomic<bool> closed_{false};
  std::thread server_;
};

}  // namespace deltacast
