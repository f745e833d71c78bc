// The soak's processes, each in its own network namespace of a NetnsTestbed: a producer
// (deltacast-bench sync --role producer --commands) on host "p", driven by commands on its stdin,
// and consumers (--role consumer --hash-commits) on hosts c0, c1, ...; any of them SIGKILLed and
// started again. Every JSON event a consumer prints goes to a callback (from its reader thread).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/child_process.h"
#include "core/status.h"
#include "testbed/netns_testbed.h"
#include "cli/trust_options.h"

namespace deltacast::bench {

struct SoakClusterOptions {
  NetnsTestbed* testbed = nullptr;  // hosts "p" and consumer_host(i); every host a port on each plane
  int consumers = 6;
  uint16_t port = 7400;             // the producer's control port (the same after every restart)
  uint64_t elements = 1 << 24;
  TrustArgs trust{"0x50a6", "authenticated"};  // the soak runs authenticated, as deployments do
  bool verbose = false;             // the processes' logs on our stderr (otherwise discarded)
};

class SoakCluster {
 public:
  using OnEvent = std::function<void(const std::string& consumer, const nlohmann::json& event)>;

  SoakCluster(SoakClusterOptions options, OnEvent on_event);
  ~SoakCluster();

  static std::string consumer_host(int i);
  // The consumer a host name stands for (consumer_host's inverse), -1 for other hosts.
  static int consumer_index(const std::string& host);

  // Starts the producer (trace seed `seed`) and waits until it listens; returns its epoch.
  Result<uint64_t> start_producer(uint64_t seed);
  // Sends a command to the producer and returns its answer: the next event named `answer` (an
  // error event or the producer's exit fails).
  Result<nlohmann::json> command(const std::string& line, const std::string& answer, std::chrono::milliseconds timeout);
  void kill_producer();

  Status start_consumer(int i);
  void kill_consumer(int i);
  bool consumer_up(int i) const;
  // Consumers that exited without being killed or stopped (a crash): their hosts and how they ended
  // (as waitpid reports it), each once; they count as down from then on.
  std::vector<std::pair<std::string, int>> exited_by_themselves();
  // Asks every consumer to stop (SIGTERM: each reports what it holds as it exits) and reaps them.
  void stop_consumers();

 private:
  std::vector<std::string> rail_flags(const std::string& host) const;
  std::vector<std::string> in_namespace(const std::string& host, std::vector<std::string> argv) const;

  SoakClusterOptions options_;
  OnEvent on_event_;
  std::string self_;
  std::unique_ptr<ChildProcess> producer_;
  mutable std::mutex mu_;  // consumers_ (the fault thread kills and starts them, the driver counts)
  std::vector<std::unique_ptr<ChildProcess>> consumers_;
};

}  // namespace deltacast::bench
