// deltacast-testbed: builds hosts and rails from network namespaces for tests
// that run several processes, prints them as one JSON line, then takes
// commands on stdin until it closes ("down R", "up R", "rate R 50mbit",
// "exit") and tears everything down. Tests in any language drive it; the
// namespace code itself lives once, in netns_testbed.cc.
#include <csignal>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "testbed/netns_testbed.h"

using namespace deltacast;

namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

Result<TestbedRail> parse_rail_arg(const std::string& text) {
  // HOST_A:HOST_B[:RATE]
  std::stringstream in(text);
  TestbedRail rail;
  std::getline(in, rail.a, ':');
  std::getline(in, rail.b, ':');
  std::getline(in, rail.rate, ':');
  if (rail.a.empty() || rail.b.empty()) return invalid_argument("rail '{}' is not HOST_A:HOST_B[:RATE]", text);
  return rail;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"deltacast-testbed: network-namespace hosts and rails for multi-process tests"};
  std::vector<std::string> hosts, rail_args;
  app.add_option("--host", hosts, "A host (a network namespace); repeat")->required();
  app.add_option("--rail", rail_args, "A rail HOST_A:HOST_B[:RATE] (veth pair, tbf RATE); repeat");
  CLI11_PARSE(app, argc, argv);
  if (Status s = NetnsTestbed::available(); !s.ok()) {
    fmt::print(stderr, "deltacast-testbed: {}\n", s.message());
    return 77;
  }
  std::vector<TestbedRail> rails;
  for (const auto& r : rail_args) {
    auto rail = parse_rail_arg(r);
    if (!rail.ok()) {
      fmt::print(stderr, "deltacast-testbed: {}\n", rail.status().message());
      return 2;
    }
    rails.push_back(*rail);
  }
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  auto testbed = NetnsTestbed::create(hosts, rails);
  if (!testbed.ok()) {
    fmt::print(stderr, "deltacast-testbed: {}\n", testbed.status().to_string());
    return 1;
  }
  nlohmann::json out;
  for (const auto& h : hosts) out["hosts"][h] = (*testbed)->netns(h);
  out["rails"] = nlohmann::json::array();
  for (size_t r = 0; r < rails.size(); ++r) {
    out["rails"].push_back({{"a", rails[r].a},
                            {"b", rails[r].b},
                            {"a_address", (*testbed)->address(r, true).host},
                            {"b_address", (*testbed)->address(r, false).host},
                            {"a_interface", (*testbed)->interface(r, true)},
                            {"b_interface", (*testbed)->interface(r, false)},
                            {"rate", rails[r].rate}});
  }
  std::cout << out.dump() << std::endl;
  std::string line;
  while (!g_stop && std::getline(std::cin, line)) {
    std::stringstream in(line);
    std::string command, rate;
    size_t rail = 0;
    in >> command >> rail >> rate;
    Status s;
    if (command == "exit") break;
    if (command == "down" || command == "up") {
      s = rail < rails.size() ? (*testbed)->set_link(rail, command == "up") : invalid_argument("no rail {}", rail);
    } else if (command == "rate") {
      s = rail < rails.size() ? (*testbed)->set_rate(rail, rate) : invalid_argument("no rail {}", rail);
    } else {
      s = invalid_argument("unknown command '{}'", line);
    }
    std::cout << (s.ok() ? "ok" : "error " + s.message()) << std::endl;
  }
  return 0;  // the testbed's destructor tears everything down
}
