#include "broadcast/transport/rail.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>

namespace deltacast {

std::string Endpoint::to_string() const { return port == 0 ? host : fmt::format("{}:{}", host, port); }

std::string RailSpec::to_string() const {
  return fmt::format("{}{}->{}", name.empty() ? "" : name + " ", local.host, remote.to_string());
}

Result<Endpoint> parse_endpoint(std::string_view text, uint16_t default_port) {
  Endpoint e;
  const size_t colon = text.rfind(':');
  std::string_view host = text;
  e.port = default_port;
  if (colon != std::string_view::npos) {
    host = text.substr(0, colon);
    const std::string_view port = text.substr(colon + 1);
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || end != port.data() + port.size() || value > 65535) {
      return invalid_argument("'{}' has an invalid port", text);
    }
    e.port = static_cast<uint16_t>(value);
  }
  in_addr parsed{};
  e.host = std::string(host);
  if (inet_pton(AF_INET, e.host.c_str(), &parsed) != 1) return invalid_argument("'{}' is not an IPv4 address", host);
  return e;
}

Result<RailSpec> parse_rail(std::string_view text, uint16_t default_port) {
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos) return invalid_argument("rail '{}' is not LOCAL=REMOTE", text);
  DC_ASSIGN_OR_RETURN(Endpoint local, parse_endpoint(text.substr(0, eq)));
  DC_ASSIGN_OR_RETURN(Endpoint remote, parse_endpoint(text.substr(eq + 1), default_port));
  if (local.port != 0) return invalid_argument("rail '{}': the local side takes no port", text);
  if (remote.port == 0) return invalid_argument("rail '{}': the remote side needs a port", text);
  return RailSpec{local, remote, ""};
}

std::string read_line(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  return line;
}

std::vector<std::string> ipv4_addresses(const std::string& interface) {
  std::vector<std::string> out;
  ifaddrs* addrs = nullptr;
  if (interface.empty() || getifaddrs(&addrs) != 0) return out;
  for (ifaddrs* a = addrs; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET || interface != a->ifa_name) continue;
    char text[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof(text));
    out.emplace_back(text);
  }
  freeifaddrs(addrs);
  return out;
}

namespace {

int64_t read_number(const std::filesystem::path& p, int64_t fallback) {
  const std::string s = read_line(p);
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && end != s.data() ? v : fallback;
}

}  // namespace

std::vector<NicInfo> discover_nics(const std::string& sysfs_root) {
  std::vector<NicInfo> nics;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(sysfs_root, ec)) {
    NicInfo nic;
    nic.name = entry.path().filename().string();
    if (nic.name == "lo") continue;
    nic.speed_mbps = read_number(entry.path() / "speed", -1);
    nic.numa_node = static_cast<int>(read_number(entry.path() / "device" / "numa_node", -1));
    nic.up = read_line(entry.path() / "operstate") == "up";
    const auto device = std::filesystem::read_symlink(entry.path() / "device", ec);
    if (!ec) nic.pci_path = device.filename().string();
    ec.clear();
    const auto addresses = ipv4_addresses(nic.name);
    if (!addresses.empty()) nic.address = addresses.front();
    nics.push_back(nic);
  }
  std::sort(nics.begin(), nics.end(), [](const NicInfo& a, const NicInfo& b) { return a.name < b.name; });
  return nics;
}

}  // namespace deltacast
