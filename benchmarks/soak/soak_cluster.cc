#include "soak/soak_cluster.h"

#include <signal.h>

#include <fmt/format.h>

namespace deltacast::bench {

SoakCluster::SoakCluster(SoakClusterOptions options, OnEvent on_event)
    : options_(std::move(options)), on_event_(std::move(on_event)), self_(executable_dir() + "/deltacast-bench") {
  consumers_.resize(static_cast<size_t>(options_.consumers));
}

SoakCluster::~SoakCluster() {
  stop_consumers();
  kill_producer();
}

std::string SoakCluster::consumer_host(int i) { return fmt::format("c{}", i); }

int SoakCluster::consumer_index(const std::string& host) {
  if (host.size() < 2 || host[0] != 'c' || host.find_first_not_of("0123456789", 1) != std::string::npos) return -1;
  return std::stoi(host.substr(1));
}

std::vector<std::string> SoakCluster::rail_flags(const std::string& host) const {
  std::vector<std::string> out;
  for (size_t plane = 0; plane < options_.testbed->planes(); ++plane) {
    out.push_back("--rail");
    out.push_back(options_.testbed->plane_address(plane, host).host);
  }
  return out;
}

std::vector<std::string> SoakCluster::in_namespace(const std::string& host, std::vector<std::string> argv) const {
  std::vector<std::string> out = {"ip", "netns", "exec", options_.testbed->netns(host), self_};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

Result<uint64_t> SoakCluster::start_producer(uint64_t seed) {
  kill_producer();
  std::vector<std::string> argv = {"sync", "--role", "producer", "--commands", "--die-with-parent",
                                   "--listen", fmt::format("0.0.0.0:{}", options_.port),
                                   "--elements", std::to_string(options_.elements),
                                   "--seed", std::to_string(seed)};
  for (const std::string& a : options_.trust.command_line()) argv.push_back(a);
  for (auto& flag : rail_flags("p")) argv.push_back(std::move(flag));
  DC_ASSIGN_OR_RETURN(producer_, ChildProcess::spawn(in_namespace("p", argv), /*with_stdin=*/true, nullptr,
                                                     /*quiet=*/!options_.verbose));
  DC_ASSIGN_OR_RETURN(nlohmann::json listening, command("", "listening", std::chrono::seconds(120)));
  return listening.at("epoch").get<uint64_t>();
}

Result<nlohmann::json> SoakCluster::command(const std::string& line, const std::string& answer,
                                            std::chrono::milliseconds timeout) {
  if (!producer_) return failed_precondition("no producer is running");
  if (!line.empty()) DC_RETURN_IF_ERROR(producer_->write_line(line));
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return deadline_exceeded("the producer did not answer '{}' within {} ms", line, timeout.count());
    DC_ASSIGN_OR_RETURN(std::string text, producer_->read_line(left));
    const auto event = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!event.is_object()) continue;  // not one of its JSON events
    const std::string name = event.value("event", "");
    if (name == answer) return event;
    if (name == "error") return internal_error("the producer answered '{}' with: {}", line, event.value("error", ""));
  }
}

void SoakCluster::kill_producer() {
  if (!producer_) return;
  ::kill(producer_->pid(), SIGKILL);
  producer_.reset();  // reaps it
}

Status SoakCluster::start_consumer(int i) {
  const std::string host = consumer_host(i);
  std::vector<std::string> argv = {"sync", "--role", "consumer", "--hash-commits", "--die-with-parent",
                                   "--name", host, "--node", host,
                                   "--elements", std::to_string(options_.elements)};
  for (const std::string& a : options_.trust.command_line()) argv.push_back(a);
  // Every plane's address of the producer: the consumer finds it over whichever rail is up.
  for (size_t plane = 0; plane < options_.testbed->planes(); ++plane) {
    argv.push_back("--connect");
    argv.push_back(fmt::format("{}:{}", options_.testbed->plane_address(plane, "p").host, options_.port));
  }
  for (auto& flag : rail_flags(host)) argv.push_back(std::move(flag));
  auto on_line = [this, host](const std::string& line) {
    const auto event = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (event.is_object()) on_event_(host, event);
  };
  DC_ASSIGN_OR_RETURN(auto child, ChildProcess::spawn(in_namespace(host, argv), false, on_line, !options_.verbose));
  std::lock_guard<std::mutex> lock(mu_);
  consumers_[static_cast<size_t>(i)] = std::move(child);
  return Status();
}

void SoakCluster::kill_consumer(int i) {
  std::unique_ptr<ChildProcess> victim;
  {
    std::lock_guard<std::mutex> lock(mu_);
    victim = std::move(consumers_[static_cast<size_t>(i)]);
  }
  if (!victim) return;
  ::kill(victim->pid(), SIGKILL);
  victim.reset();
}

bool SoakCluster::consumer_up(int i) const {
  std::lock_guard<std::mutex> lock(mu_);
  return consumers_[static_cast<size_t>(i)] != nullptr;
}

std::vector<std::pair<std::string, int>> SoakCluster::exited_by_themselves() {
  std::vector<std::unique_ptr<ChildProcess>> gone;
  std::vector<std::pair<std::string, int>> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < consumers_.size(); ++i) {
      if (!consumers_[i]) continue;
      auto status = consumers_[i]->wait(std::chrono::milliseconds(0));
      if (!status.ok()) continue;  // still running
      out.emplace_back(consumer_host(static_cast<int>(i)), *status);
      gone.push_back(std::move(consumers_[i]));
    }
  }
  return out;  // `gone` reaped outside the lock
}

void SoakCluster::stop_consumers() {
  std::vector<std::unique_ptr<ChildProcess>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : consumers_) all.push_back(std::move(c));
  }
  for (auto& c : all) {
    if (c) ::kill(c->pid(), SIGTERM);
  }
  for (auto& c : all) {
    if (c) c->terminate(std::chrono::seconds(10));
  }
}

}  // namespace deltacast::bench
