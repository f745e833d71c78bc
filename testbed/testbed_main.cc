// deltacast-testbed: builds hosts, point-to-point rails and switched planes
// from network namespaces for tests that run several processes, prints them
// as one JSON line, then takes commands on stdin until it closes ("down R",
// "up R", "rate R 50mbit", "pdown P HOST", "pup P HOST", "prate P HOST RATE",
// "wdown P SITE SITE", "wup P SITE SITE", "exit") and tears everything down. Tests in any language drive it; the
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
  std::vector<std::string> hosts, rail_args, plane_args, site_args;
  TestbedSites sites;
  app.add_option("--host", hosts, "A host (a network namespace); repeat")->required();
  app.add_option("--rail", rail_args, "A rail HOST_A:HOST_B[:RATE] (veth pair, tbf RATE); repeat");
  app.add_option("--plane", plane_args, "A switched rail joining every host, shaped to RATE per port ('-': unshaped); repeat");
  app.add_option("--site", site_args, "HOST=SITE: the host's plane ports join SITE's bridges (default: site ''); repeat");
  bool management_plane = false;
  app.add_flag("--management-plane", management_plane,
               "One more plane, unshaped, joining every host whatever its site (control connections)");
  app.add_option("--wan-rate", sites.wan_rate, "tbf rate of each WAN link between two sites, each way (default: unshaped)");
  app.add_option("--wan-delay-ms", sites.wan_delay_ms, "Delay of each WAN link, each way")->check(CLI::Range(0.0, 10000.0));
  CLI11_PARSE(app, argc, argv);
  for (const auto& s : site_args) {
    const size_t eq = s.find('=');
    if (eq == std::string::npos || eq == 0) {
      fmt::print(stderr, "deltacast-testbed: --site '{}' is not HOST=SITE\n", s);
      return 2;
    }
    sites.of_host[s.substr(0, eq)] = s.substr(eq + 1);
  }
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
  if (management_plane) planes.push_back(TestbedPlane{"", true});
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  auto testbed = NetnsTestbed::create(hosts, rails, planes, sites);
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
    out["planes"].push_back({{"rate", planes[p].rate}, {"spans_sites", planes[p].spans_sites}, {"interface", (*testbed)->plane_interface(p)}, {"addresses", addresses}});
  }
  out["switch"] = (*testbed)->switch_netns();
  out["sites"] = (*testbed)->sites();
  out["wans"] = nlohmann::json::array();
  for (size_t p = 0; p < planes.size(); ++p) {
    for (const auto& from : planes[p].spans_sites ? std::vector<std::string>{} : (*testbed)->sites()) {
      for (const auto& to : (*testbed)->sites()) {
        if (from != to) out["wans"].push_back({{"plane", p}, {"from", from}, {"to", to}, {"interface", (*testbed)->wan_interface(p, from, to)}});
      }
    }
  }
  std::cout << out.dump() << std::endl;
  std::string line;
  while (!g_stop && std::getline(std::cin, line)) {
    std::stringstream in(line);
    std::string command, rate, host, site_a, site_b;
    size_t rail = 0;
    in >> command >> rail;
    if (command.rfind("p", 0) == 0) in >> host;
    if (command.rfind("w", 0) == 0) in >> site_a >> site_b;
    in >> rate;
    Status s;
    if (command == "exit") break;
    if (command == "wdown" || command == "wup") {
      s = (*testbed)->set_wan_link(rail, site_a, site_b, command == "wup");
    } else if (command == "pdown" || command == "pup") {
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
