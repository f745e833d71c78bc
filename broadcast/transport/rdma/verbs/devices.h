// RDMA devices and ports as this machine has them: which NIC, its state, the
// network interface and IPv4 addresses behind each port (what rails name),
// and where it sits (NUMA node, PCI path) so that rails can be paired with
// the GPUs and cores near them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace deltacast::verbs {

struct RdmaPort {
  std::string device;            // mlx5_0, rxe0
  uint8_t port = 1;
  bool active = false;           // IBV_PORT_ACTIVE
  std::string link_layer;        // InfiniBand or Ethernet
  std::string netdev;            // the Ethernet interface behind a RoCE port, empty for InfiniBand
  std::vector<std::string> ipv4; // the netdev's addresses
  int numa_node = -1;            // -1: unknown (virtual devices)
  std::string pci_path;          // sysfs path of the PCI function, empty for virtual devices
};

// Every port of every RDMA device; unavailable (with the reason) when the
// machine has no RDMA device or the verbs library cannot reach the kernel.
Result<std::vector<RdmaPort>> discover_rdma_ports();

}  // namespace deltacast::verbs
