// Several hosts with several rails on one machine, for tests and benchmarks:
// each host is a network namespace, each rail a veth pair between two of them
// (addresses 198.18.<rail>.1 and .2), optionally shaped with tbf. Names carry
// the process id so that parallel runs never collide, namespaces left behind
// by dead processes are removed, a blackhole route in the root namespace
// keeps test addresses from leaking out, and everything is torn down in the
// destructor, also when a test fails. Needs root (CI runs as root).
#pragma once

#include <map>
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
  // One bridge for every host whatever its site (a management network, for control connections
  // that must outlive a WAN link): no WAN links on it.
  bool spans_sites = false;
};

// Sites on the planes: each plane has a bridge per site, and every two sites
// are joined on each plane by a WAN link (a WanRelay between two taps) shaped
// to `wan_rate` and delayed by `wan_delay_ms` each way. The WAN ports of a
// bridge are isolated from one another: a frame from one site reaches only
// the hosts of the next (no loops among three sites, no transit: traffic
// between two sites crosses their own link or none).
struct TestbedSites {
  std::map<std::string, std::string> of_host;  // host -> site; hosts left out are in site ""
  std::string wan_rate;                        // empty: unshaped
  double wan_delay_ms = 0;
};

class WanRelay;

class NetnsTestbed {
 public:
  // Whether this process can build namespaces (root, iproute2 present), and if not why.
  static Status available();
  static Result<std::unique_ptr<NetnsTestbed>> create(const std::vector<std::string>& hosts,
                                                      const std::vector<TestbedRail>& rails,
                                                      const std::vector<TestbedPlane>& planes = {},
                                                      const TestbedSites& sites = {});
  ~NetnsTestbed();
  NetnsTestbed(const NetnsTestbed&) = delete;
  NetnsTestbed& operator=(const NetnsTestbed&) = delete;

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

  // Sites in order of their first host; the first is the first host's.
  const std::vector<std::string>& sites() const { return site_names_; }
  // The interface, in the switch namespace, by which the WAN link from site
  // `from` to site `to` on `plane` enters `to`'s bridge: its received bytes
  // are what crossed into `to`.
  std::string wan_interface(size_t plane, const std::string& from, const std::string& to) const;
  // The WAN link between two sites on a plane cut (frames dropped silently both ways) or mended.
  Status set_wan_link(size_t plane, const std::string& a, const std::string& b, bool up);
  std::string switch_netns() const { return prefix_ + "-sw"; }

  // Runs a shell command inside a host's namespace.
  Status exec(const std::string& host, const std::string& command) const;

 private:
  NetnsTestbed() = default;
  Status build(const std::vector<std::string>& hosts);
  Status build_planes();
  size_t host_index(const std::string& host) const;
  Status build_wans();
  size_t site_index(const std::string& site) const;
  std::string bridge(size_t plane, size_t site) const;
  std::string switch_port(size_t plane, size_t host) const;
  void teardown();

  std::string prefix_;
  std::vector<std::string> hosts_;
  std::vector<TestbedRail> rails_;
  std::vector<TestbedPlane> planes_;
  TestbedSites sites_;
  std::vector<std::string> site_names_;
  std::vector<size_t> host_site_;  // index into site_names_, per host
  // wans_[plane][i][j], i < j: the link between sites i and j.
  std::vector<std::vector<std::vector<std::unique_ptr<WanRelay>>>> wans_;
};

}  // namespace deltacast
