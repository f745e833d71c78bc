#include "broadcast/transport/rail.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace deltacast {
namespace {

TEST(Rail, ParsesEndpointsAndRails) {
  EXPECT_EQ(parse_endpoint("10.0.0.1:8080")->port, 8080);
  EXPECT_EQ(parse_endpoint("10.0.0.1", 77)->port, 77);
  EXPECT_FALSE(parse_endpoint("10.0.0.1:99999").ok());
  EXPECT_FALSE(parse_endpoint("host.example:80").ok()) << "only numeric addresses";
  auto rail = parse_rail("198.18.0.1=198.18.0.2:7000", 0);
  ASSERT_TRUE(rail.ok());
  EXPECT_EQ(rail->local.host, "198.18.0.1");
  EXPECT_EQ(rail->remote.to_string(), "198.18.0.2:7000");
  EXPECT_FALSE(parse_rail("198.18.0.1", 0).ok());
  EXPECT_FALSE(parse_rail("198.18.0.1:5=198.18.0.2:7000", 0).ok()) << "the local side takes no port";
  EXPECT_FALSE(parse_rail("198.18.0.1=198.18.0.2", 0).ok()) << "the remote side needs a port";
  EXPECT_EQ(parse_rail("198.18.0.1=198.18.0.2", 9000)->remote.port, 9000);
}

TEST(Rail, DiscoversNicsFromSysfs) {
  // A sysfs tree as a server with one physical NIC and one virtual one presents it.
  const auto root = std::filesystem::temp_directory_path() / ("dc_sysfs_" + std::to_string(getpid()));
  std::filesystem::create_directories(root / "eth9" / "device");
  std::filesystem::create_directories(root / "veth9");
  std::filesystem::create_directories(root / "lo");
  std::ofstream(root / "eth9" / "speed") << "100000\n";
  std::ofstream(root / "eth9" / "operstate") << "up\n";
  std::ofstream(root / "eth9" / "device" / "numa_node") << "1\n";
  std::ofstream(root / "veth9" / "speed") << "-1\n";
  std::ofstream(root / "veth9" / "operstate") << "down\n";
  const auto nics = discover_nics(root.string());
  std::filesystem::remove_all(root);
  ASSERT_EQ(nics.size(), 2u) << "loopback is left out";
  EXPECT_EQ(nics[0].name, "eth9");
  EXPECT_EQ(nics[0].speed_mbps, 100000);
  EXPECT_EQ(nics[0].numa_node, 1);
  EXPECT_TRUE(nics[0].up);
  EXPECT_EQ(nics[1].name, "veth9");
  EXPECT_EQ(nics[1].speed_mbps, -1);
  EXPECT_FALSE(nics[1].up);
}

TEST(Rail, DiscoversThisMachine) {
  // Whatever the machine has, discovery must not fail and must report sane values.
  for (const auto& nic : discover_nics()) {
    EXPECT_FALSE(nic.name.empty());
    EXPECT_NE(nic.name, "lo");
    EXPECT_GE(nic.numa_node, -1);
  }
}

}  // namespace
}  // namespace deltacast
