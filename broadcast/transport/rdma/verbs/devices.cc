#include "broadcast/transport/rdma/verbs/devices.h"

#include "broadcast/transport/rail.h"

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace deltacast::verbs {

namespace {

// The netdev of a RoCE port: the first GID entry that names one.
std::string port_netdev(const std::filesystem::path& port_dir) {
  const auto ndevs = port_dir / "gid_attrs" / "ndevs";
  for (int i = 0; i < 16; ++i) {
    const std::string name = read_line(ndevs / std::to_string(i));
    if (!name.empty()) return name;
  }
  return {};
}

}  // namespace

Result<std::vector<RdmaPort>> discover_rdma_ports() {
  int n = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) {
    return unavailable("no RDMA device: the verbs library cannot reach the kernel ({})",
                       errno ? std::strerror(errno) : "no uverbs support");
  }
  std::vector<RdmaPort> ports;
  for (int d = 0; d < n; ++d) {
    const std::string name = ibv_get_device_name(list[d]);
    ibv_context* context = ibv_open_device(list[d]);
    if (context == nullptr) continue;
    ibv_device_attr attr{};
    if (ibv_query_device(context, &attr) == 0) {
      const std::filesystem::path sys = std::filesystem::path("/sys/class/infiniband") / name;
      for (uint8_t p = 1; p <= attr.phys_port_cnt; ++p) {
        ibv_port_attr port{};
        if (ibv_query_port(context, p, &port) != 0) continue;
        RdmaPort out;
        out.device = name;
        out.port = p;
        out.active = port.state == IBV_PORT_ACTIVE;
        out.link_layer = port.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand";
        out.netdev = port_netdev(sys / "ports" / std::to_string(p));
        out.ipv4 = ipv4_addresses(out.netdev);
        const std::string numa = read_line(sys / "device" / "numa_node");
        out.numa_node = numa.empty() ? -1 : std::atoi(numa.c_str());
        std::error_code ec;
        const auto pci = std::filesystem::canonical(sys / "device", ec);
        if (!ec && pci.string().find("/pci") != std::string::npos) out.pci_path = pci.string();
        ports.push_back(std::move(out));
      }
    }
    ibv_close_device(context);
  }
  ibv_free_device_list(list);
  if (ports.empty()) return unavailable("no RDMA device: none of {} listed devices has a usable port", n);
  return ports;
}

}  // namespace deltacast::verbs
