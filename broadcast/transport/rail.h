// Rails: a path from a local address to a remote address. Given explicitly
// ("LOCAL=REMOTE", how tests and unusual clusters work) or discovered from
// the machine's NICs in sysfs.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace deltacast {

struct Endpoint {
  std::string host;   // IPv4 address
  uint16_t port = 0;  // 0: any (listen) or the default port (connect)

  std::string to_string() const;
  friend bool operator==(const Endpoint&, const Endpoint&) = default;
};

// "1.2.3.4" or "1.2.3.4:5678"; the host must be a numeric IPv4 address.
Result<Endpoint> parse_endpoint(std::string_view text, uint16_t default_port = 0);

// A peer's data endpoints, one per rail.
using PeerEndpoints = std::vector<Endpoint>;

struct RailSpec {
  Endpoint local;   // address the sender binds (port 0)
  Endpoint remote;  // the receiver's listening address
  std::string name; // for logs and telemetry, "rail0"...

  std::string to_string() const;
};

// "LOCAL=REMOTE[:PORT]".
Result<RailSpec> parse_rail(std::string_view text, uint16_t default_port);

// A network interface as sysfs describes it.
struct NicInfo {
  std::string name;      // eth0
  std::string address;   // first IPv4 address, may be empty
  int64_t speed_mbps = -1;  // -1 when unknown (virtual NICs)
  int numa_node = -1;
  std::string pci_path;  // e.g. 0000:17:00.0, empty for virtual devices
  bool up = false;
};

// The first line of a (sysfs) file, empty when it cannot be read.
std::string read_line(const std::filesystem::path& path);
// The IPv4 addresses of a network interface, in the order getifaddrs lists them.
std::vector<std::string> ipv4_addresses(const std::string& interface);

// NICs of this machine (loopback left out), from /sys/class/net and getifaddrs.
std::vector<NicInfo> discover_nics(const std::string& sysfs_root = "/sys/class/net");

}  // namespace deltacast
