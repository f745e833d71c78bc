// deltacast-bench rails: the rails this machine offers: its NICs (address,
// speed, NUMA node, PCI path) and its RDMA ports (device, state, the NIC
// behind each, NUMA node, PCI path), or why there are none.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/bench_commands.h"
#include "broadcast/transport/rail.h"
#if DELTACAST_HAVE_RDMA
#include "broadcast/transport/rdma/verbs/devices.h"
#endif

namespace deltacast::bench {

namespace {

nlohmann::json rdma_ports(std::string* why) {
  nlohmann::json out = nlohmann::json::array();
#if DELTACAST_HAVE_RDMA
  auto ports = verbs::discover_rdma_ports();
  if (!ports.ok()) {
    *why = ports.status().message();
    return out;
  }
  for (const auto& p : *ports) {
    out.push_back({{"device", p.device}, {"port", p.port}, {"active", p.active}, {"link_layer", p.link_layer},
                   {"netdev", p.netdev}, {"ipv4", p.ipv4}, {"numa_node", p.numa_node}, {"pci_path", p.pci_path}});
  }
#else
  *why = "this build has no RDMA support";
#endif
  return out;
}

void run(bool json) {
  nlohmann::json nics = nlohmann::json::array();
  for (const auto& n : discover_nics()) {
    nics.push_back({{"name", n.name}, {"address", n.address}, {"speed_mbps", n.speed_mbps}, {"numa_node", n.numa_node},
                    {"pci_path", n.pci_path}, {"up", n.up}});
  }
  std::string why;
  nlohmann::json ports = rdma_ports(&why);
  if (json) {
    fmt::print("{}\n", nlohmann::json{{"nics", nics}, {"rdma_ports", ports},
                                      {"rdma_unavailable", why.empty() ? nlohmann::json() : nlohmann::json(why)}}
                           .dump());
    return;
  }
  fmt::print("NICs:\n");
  for (const auto& n : nics) {
    fmt::print("  {:<12} {:<16} {:>7} Mbit/s  numa {:>2}  {}  {}\n", n["name"].get<std::string>(),
               n["address"].get<std::string>(), n["speed_mbps"].get<int64_t>(), n["numa_node"].get<int>(),
               n["up"].get<bool>() ? "up" : "down", n["pci_path"].get<std::string>());
  }
  fmt::print("RDMA ports:{}\n", why.empty() ? "" : " none (" + why + ")");
  for (const auto& p : ports) {
    fmt::print("  {}/{:<3} {:<6} {:<10} {:<10} {:<16} numa {:>2}  {}\n", p["device"].get<std::string>(),
               p["port"].get<int>(), p["active"].get<bool>() ? "active" : "down", p["link_layer"].get<std::string>(),
               p["netdev"].get<std::string>(), p["ipv4"].empty() ? "" : p["ipv4"][0].get<std::string>(),
               p["numa_node"].get<int>(), p["pci_path"].get<std::string>());
  }
}

}  // namespace

void add_rails_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("rails", "List the NICs and RDMA ports that can carry rails");
  cmd->add_flag("--json", *json, "JSON output");
  cmd->callback([json] { run(*json); });
}

}  // namespace deltacast::bench
