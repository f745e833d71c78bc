// Several hosts with several rails on one machine, for tests and benchmarks:
// each host is a network namespace, each rail a veth pair between two of them
// (addresses 198.18.<rail>.1 and .2), optionally shaped with tbf. Names carry
// the process id so that parallel runs never collide, namespaces left behind
// by dead processes are removed, a blackhole route in the root namespace
// keeps test addresses from leaking out, and everything is torn down in the
// destructor, also when a test fails. Needs root (CI runs as root).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "broadcast/transport/rail.h"
#include "core/status.h"

namespace deltacast {

struct TestbedRail {
  std::string a;     // host names
  std::string b;
  std::string rate;  // tbf rate on both ends ("1gbit", "200mbit"), empty: unshaped
};

// A switched rail: every host has one port on it (a veth into a bridge in a
// switch namespace), addresses 198.19.<plane>.<host index + 1>. tbf on both
// ends of a host's port shapes its uplink and its downlink.
struct TestbedPlane {
  std::string rate;  // empty: unshaped
};

class NetnsTestbed {
 public:
  // Whether this process can build namespaces (root, iproute2 present), and if not why.
  static Status available();
  static Result<std::unique_ptr<NetnsTestbed>> create(const std::vector<std::string>& hosts,
                                                      const std::vector<TestbedRail>& rails,
                                                      const std::vector<TestbedPlane>& planes = {});
  ~NetnsTestbed();

  std::string netns(const std::string& host) const;
  // The address of rail `rail`'s end on its `a` (true) or `b` host.
  Endpoint address(size_t rail, bool a_side) const;
  std::string interface(size_t rail, bool a_side) const;
  size_t rails() const { return rails_.size(); }

  // Cable pulled / plugged back: both ends go down or up.
  Status set_link(size_t rail, bool up);
  // Changes the tbf rate of both ends.
  Status set_rate(size_t rail, const std::string& rate);
  size_t planes() const { return planes_.size(); }
  Endpoint plane_address(size_t plane, const std::string& host) const;
  std::string plane_interface(size_t plane) const;
  // A host's port on a plane: cable pulled or plugged back, or shaped anew (both directions).
  Status set_plane_link(size_t plane, const std::string& host, bool up);
  Status set_plane_rate(size_t plane, const std::string& host, const std::string& rate);

  // Runs a shell command inside a host's namespace.
  Status exec(const std::string& host, const std::string& command) const;

 private:
  NetnsTestbed() = default;
  Status build(const std::vector<std::string>& hosts);
  Status build_planes();
  size_t host_index(const std::string& host) const;
  std::string switch_netns() const { return prefix_ + "-sw"; }
  std::string switch_port(size_t plane, size_t host) const;
  void teardown();

  std::string prefix_;
  std::vector<std::string> hosts_;
  std::vector<TestbedRail> rails_;
  std::vector<TestbedPlane> planes_;
};

}  // namespace deltacast
