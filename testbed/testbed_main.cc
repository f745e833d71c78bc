// deltacast-testbed: builds hosts, point-to-point rails and switched planes
// from network namespaces for tests that run several processes, prints them
// as one JSON line, then takes commands on stdin until it closes ("down R",
// "up R", "rate R 50mbit", "pdown P HOST", "pup P HOST", "prate P HOST RATE",
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
  std::vector<std::string> hosts, rail_args, plane_args;
  app.add_option("--host", hosts, "A host (a network namespace); repeat")->required();
  app.add_option("--rail", rail_args, "A rail HOST_A:HOST_B[:RATE] (veth pair, tbf RATE); repeat");
  app.add_option("--plane", plane_args, "A switched rail joining every host, shaped to RATE per port ('-': unshaped); repeat");
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
  std::vector<TestbedPlane> planes;
  for (const auto& p : plane_args) planes.push_back(TestbedPlane{p == "-" ? "" : p});
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  auto testbed = NetnsTestbed::create(hosts, rails, planes);
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
  out["planes"] = nlohmann::json::array();
  for (size_t p = 0; p < planes.size(); ++p) {
    nlohmann::json addresses;
    for (const auto& h : hosts) addresses[h] = (*testbed)->plane_address(p, h).host;
    out["planes"].push_back({{"rate", planes[p].rate}, {"interface", (*testbed)->plane_interface(p)}, {"addresses", addresses}});
  }
  std::cout << out.dump() << std::endl;
  std::string line;
  while (!g_stop && std::getline(std::cin, line)) {
    std::stringstream in(line);
    std::string command, rate, host;
    size_t rail = 0;
    in >> command >> rail;
    if (command.rfind("p", 0) == 0) in >> host;
    in >> rate;
    Status s;
    if (command == "exit") break;
    if (command == "pdown" || command == "pup") {
      s = (*testbed)->set_plane_link(rail, host, command == "pup");
    } else if (command == "prate") {
      s = (*testbed)->set_plane_rate(rail, host, rate);
    } else if (command == "down" || command == "up") {
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
