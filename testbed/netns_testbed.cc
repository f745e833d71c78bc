#include "testbed/netns_testbed.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "core/log.h"
#include "testbed/wan_relay.h"

namespace deltacast {

namespace {

constexpr const char* kNamePrefix = "dct";
std::atomic<int> g_instances{0};

// Runs a command, returns its status and output.
Result<std::string> run(const std::string& command) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return io_error("cannot run '{}'", command);
  std::string out;
  std::array<char, 512> buffer;
  while (fgets(buffer.data(), buffer.size(), pipe) != nullptr) out += buffer.data();
  const int rc = pclose(pipe);
  if (rc != 0) return io_error("'{}' failed ({}): {}", command, WEXITSTATUS(rc), out);
  return out;
}

Status ok(const std::string& command) { return run(command).status(); }

bool process_alive(long pid) { return kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM; }

// Namespaces named by this testbed for processes that no longer exist.
void remove_stale() {
  auto list = run("ip netns list");
  if (!list.ok()) return;
  size_t at = 0;
  const std::string& text = *list;
  while (at < text.size()) {
    const size_t end = text.find('\n', at);
    const std::string line = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
    at = end == std::string::npos ? text.size() : end + 1;
    const std::string name = line.substr(0, line.find(' '));
    if (name.rfind(kNamePrefix, 0) != 0) continue;
    const size_t dash = name.find('-');
    if (dash == std::string::npos) continue;
    const long pid = std::strtol(name.c_str() + 3, nullptr, 10);
    if (pid > 0 && !process_alive(pid)) (void)ok("ip netns del " + name);
  }
}

}  // namespace

Status NetnsTestbed::available() {
  if (geteuid() != 0) return unavailable("network-namespace tests need root");
  if (!ok("ip -V").ok()) return unavailable("iproute2 ('ip') is not installed");
  if (!ok("tc -V").ok()) return unavailable("'tc' is not installed");
  return Status();
}

Result<std::unique_ptr<NetnsTestbed>> NetnsTestbed::create(const std::vector<std::string>& hosts,
                                                           const std::vector<TestbedRail>& rails,
                                                           const std::vector<TestbedPlane>& planes,
                                                           const TestbedSites& sites) {
  DC_RETURN_IF_ERROR(available());
  remove_stale();
  std::unique_ptr<NetnsTestbed> t(new NetnsTestbed());
  static std::atomic<int> counter{0};
  t->prefix_ = fmt::format("{}{}-{}", kNamePrefix, getpid(), counter++);
  t->hosts_ = hosts;
  t->rails_ = rails;
  t->planes_ = planes;
  t->sites_ = sites;
  for (const auto& [host, site] : sites.of_host) {
    if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) return invalid_argument("site of unknown host '{}'", host);
  }
  for (const auto& h : hosts) {
    const auto named = sites.of_host.find(h);
    const std::string site = named == sites.of_host.end() ? "" : named->second;
    const auto known = std::find(t->site_names_.begin(), t->site_names_.end(), site);
    t->host_site_.push_back(static_cast<size_t>(known - t->site_names_.begin()));
    if (known == t->site_names_.end()) t->site_names_.push_back(site);
  }
  if (t->site_names_.size() > 1 && planes.empty()) return invalid_argument("sites join planes: name at least one plane");
  if (t->site_names_.size() > 9) return invalid_argument("a testbed takes at most 9 sites");
  ++g_instances;
  Status s = t->build(hosts);
  if (s.ok()) s = t->build_planes();
  if (s.ok()) s = t->build_wans();
  if (!s.ok()) return s;  // the destructor tears down what was built
  return t;
}

std::string NetnsTestbed::netns(const std::string& host) const { return prefix_ + "-" + host; }

Endpoint NetnsTestbed::address(size_t rail, bool a_side) const {
  return Endpoint{fmt::format("198.18.{}.{}", rail, a_side ? 1 : 2), 0};
}

std::string NetnsTestbed::interface(size_t rail, bool a_side) const {
  // Interface names have 15 characters at most; they only need to be unique per namespace.
  return fmt::format("r{}{}", rail, a_side ? "a" : "b");
}

Status NetnsTestbed::build(const std::vector<std::string>& hosts) {
  // Safety net: test addresses never leave the machine from the root namespace.
  DC_RETURN_IF_ERROR(ok("ip route replace blackhole 198.18.0.0/15"));
  for (const auto& h : hosts) {
    DC_RETURN_IF_ERROR(ok("ip netns add " + netns(h)));
    DC_RETURN_IF_ERROR(ok("ip -n " + netns(h) + " link set lo up"));
  }
  for (size_t r = 0; r < rails_.size(); ++r) {
    const TestbedRail& rail = rails_[r];
    if (std::find(hosts.begin(), hosts.end(), rail.a) == hosts.end() ||
        std::find(hosts.begin(), hosts.end(), rail.b) == hosts.end()) {
      return invalid_argument("rail {} joins unknown hosts {} and {}", r, rail.a, rail.b);
    }
    const std::string a = interface(r, true), b = interface(r, false);
    // Created in the root namespace under unique temporary names, then moved and renamed.
    const std::string ta = fmt::format("t{}{}a", getpid() % 100000, r), tb = fmt::format("t{}{}b", getpid() % 100000, r);
    DC_RETURN_IF_ERROR(ok(fmt::format("ip link add {} type veth peer name {}", ta, tb)));
    DC_RETURN_IF_ERROR(ok(fmt::format("ip link set {} netns {} name {}", ta, netns(rail.a), a)));
    DC_RETURN_IF_ERROR(ok(fmt::format("ip link set {} netns {} name {}", tb, netns(rail.b), b)));
    DC_RETURN_IF_ERROR(ok(fmt::format("ip -n {} addr add {}/24 dev {}", netns(rail.a), address(r, true).host, a)));
    DC_RETURN_IF_ERROR(ok(fmt::format("ip -n {} addr add {}/24 dev {}", netns(rail.b), address(r, false).host, b)));
    if (!rail.rate.empty()) {
      for (const auto& [ns, dev] : {std::pair{netns(rail.a), a}, std::pair{netns(rail.b), b}}) {
        DC_RETURN_IF_ERROR(
            ok(fmt::format("tc -n {} qdisc add dev {} root tbf rate {} burst 256kb latency 20ms", ns, dev, rail.rate)));
      }
    }
    DC_RETURN_IF_ERROR(set_link(r, true));
  }
  return Status();
}

size_t NetnsTestbed::host_index(const std::string& host) const {
  return static_cast<size_t>(std::find(hosts_.begin(), hosts_.end(), host) - hosts_.begin());
}

Endpoint NetnsTestbed::plane_address(size_t plane, const std::string& host) const {
  return Endpoint{fmt::format("198.19.{}.{}", plane, host_index(host) + 1), 0};
}

std::string NetnsTestbed::plane_interface(size_t plane) const { return fmt::format("p{}", plane); }

std::string NetnsTestbed::switch_port(size_t plane, size_t host) const { return fmt::format("h{}p{}", host, plane); }

namespace {
std::string tbf(const std::string& ns, const std::string& dev, const std::string& rate, const char* verb) {
  return fmt::format("tc -n {} qdisc {} dev {} root tbf rate {} burst 256kb latency 20ms", ns, verb, dev, rate);
}
}  // namespace

Status NetnsTestbed::build_planes() {
  if (planes_.empty()) return Status();
  if (hosts_.size() > 250) return invalid_argument("planes take at most 250 hosts");
  DC_RETURN_IF_ERROR(ok("ip netns add " + switch_netns()));
  for (size_t p = 0; p < planes_.size(); ++p) {
    for (size_t site = 0; site < (planes_[p].spans_sites ? 1 : site_names_.size()); ++site) {
      DC_RETURN_IF_ERROR(ok(fmt::format("ip -n {} link add {} type bridge", switch_netns(), bridge(p, site))));
      DC_RETURN_IF_ERROR(ok(fmt::format("ip -n {} link set {} up", switch_netns(), bridge(p, site))));
    }
    for (size_t h = 0; h < hosts_.size(); ++h) {
      const std::string ta = fmt::format("q{}_{}_{}a", getpid() % 100000, p, h), tb = fmt::format("q{}_{}_{}b", getpid() % 100000, p, h);
      DC_RETURN_IF_ERROR(ok(fmt::format("ip link add {} type veth peer name {}", ta, tb)));
      DC_RETURN_IF_ERROR(ok(fmt::format("ip link set {} netns {} name {}", ta, netns(hosts_[h]), plane_interface(p))));
      DC_RETURN_IF_ERROR(ok(fmt::format("ip link set {} netns {} name {}", tb, switch_netns(), switch_port(p, h))));
      const size_t site = planes_[p].spans_sites ? 0 : host_site_[h];
      DC_RETURN_IF_ERROR(ok(fmt::format("ip -n {} link set {} master {}", switch_netns(), switch_port(p, h), bridge(p, site))));
      DC_RETURN_IF_ERROR(ok(fmt::format("ip -n {} addr add {}/24 dev {}", netns(hosts_[h]),
                                        plane_address(p, hosts_[h]).host, plane_interface(p))));
      if (!planes_[p].rate.empty()) DC_RETURN_IF_ERROR(set_plane_rate(p, hosts_[h], planes_[p].rate));
      DC_RETURN_IF_ERROR(set_plane_link(p, hosts_[h], true));
    }
  }
  return Status();
}

std::string NetnsTestbed::bridge(size_t plane, size_t site) const {
  return site == 0 ? fmt::format("br{}", plane) : fmt::format("br{}s{}", plane, site);
}

size_t NetnsTestbed::site_index(const std::string& site) const {
  return static_cast<size_t>(std::find(site_names_.begin(), site_names_.end(), site) - site_names_.begin());
}

std::string NetnsTestbed::wan_interface(size_t plane, const std::string& from, const std::string& to) const {
  return fmt::format("w{}s{}s{}", plane, site_index(from), site_index(to));
}

Status NetnsTestbed::build_wans() {
  wans_.resize(planes_.size());
  for (size_t p = 0; p < planes_.size(); ++p) {
    if (planes_[p].spans_sites) continue;
    wans_[p].resize(site_names_.size());
    for (size_t i = 0; i < site_names_.size(); ++i) {
      wans_[p][i].resize(site_names_.size());
      for (size_t j = i + 1; j < site_names_.size(); ++j) {
        // Tap "wPsIsJ" is a port of site J's bridge: it delivers what comes from site I.
        const std::string into_j = wan_interface(p, site_names_[i], site_names_[j]);
        const std::string into_i = wan_interface(p, site_names_[j], site_names_[i]);
        auto relay = WanRelay::start(switch_netns(), into_i, into_j, sites_.wan_delay_ms);
        if (!relay.ok()) return relay.status();
        wans_[p][i][j] = std::move(*relay);
        for (const auto& [tap, site] : {std::pair{into_i, i}, std::pair{into_j, j}}) {
          DC_RETURN_IF_ERROR(ok(fmt::format("ip -n {} link set {} master {}", switch_netns(), tap, bridge(p, site))));
          DC_RETURN_IF_ERROR(ok(fmt::format("ip netns exec {} bridge link set dev {} isolated on", switch_netns(), tap)));
          DC_RETURN_IF_ERROR(ok(fmt::format("ip -n {} link set {} up", switch_netns(), tap)));
          if (!sites_.wan_rate.empty()) DC_RETURN_IF_ERROR(ok(tbf(switch_netns(), tap, sites_.wan_rate, "add")));
        }
      }
    }
  }
  return Status();
}

Status NetnsTestbed::set_wan_link(size_t plane, const std::string& a, const std::string& b, bool up) {
  size_t i = site_index(a), j = site_index(b);
  if (i > j) std::swap(i, j);
  if (plane >= wans_.size() || wans_[plane].empty() || j >= site_names_.size() || i == j) {
    return invalid_argument("no WAN link between sites '{}' and '{}' on plane {}", a, b, plane);
  }
  wans_[plane][i][j]->set_up(up);
  return Status();
}

Status NetnsTestbed::set_plane_link(size_t plane, const std::string& host, bool up) {
  const size_t h = host_index(host);
  if (plane >= planes_.size() || h >= hosts_.size()) return invalid_argument("no port of host '{}' on plane {}", host, plane);
  const std::string state = up ? "up" : "down";
  DC_RETURN_IF_ERROR(ok(fmt::format("ip -n {} link set {} {}", netns(host), plane_interface(plane), state)));
  DC_RETURN_IF_ERROR(ok(fmt::format("ip -n {} link set {} {}", switch_netns(), switch_port(plane, h), state)));
  if (!up) return Status();
  for (int i = 0; i < 200; ++i) {
    auto a = run(fmt::format("ip -n {} link show {}", netns(host), plane_interface(plane)));
    if (a.ok() && a->find("LOWER_UP") != std::string::npos) return Status();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return unavailable("port of host '{}' on plane {} did not come up", host, plane);
}

Status NetnsTestbed::set_plane_rate(size_t plane, const std::string& host, const std::string& rate) {
  const size_t h = host_index(host);
  if (plane >= planes_.size() || h >= hosts_.size()) return invalid_argument("no port of host '{}' on plane {}", host, plane);
  DC_RETURN_IF_ERROR(ok(tbf(netns(host), plane_interface(plane), rate, "replace")));
  return ok(tbf(switch_netns(), switch_port(plane, h), rate, "replace"));
}

Status NetnsTestbed::set_link(size_t rail, bool up) {
  const TestbedRail& r = rails_.at(rail);
  for (const auto& [ns, dev] : {std::pair{netns(r.a), interface(rail, true)}, std::pair{netns(r.b), interface(rail, false)}}) {
    DC_RETURN_IF_ERROR(ok(fmt::format("ip -n {} link set {} {}", ns, dev, up ? "up" : "down")));
  }
  if (!up) return Status();
  // A link is usable once both ends report LOWER_UP.
  for (int i = 0; i < 200; ++i) {
    auto a = run(fmt::format("ip -n {} link show {}", netns(r.a), interface(rail, true)));
    auto b = run(fmt::format("ip -n {} link show {}", netns(r.b), interface(rail, false)));
    if (a.ok() && b.ok() && a->find("LOWER_UP") != std::string::npos && b->find("LOWER_UP") != std::string::npos) {
      return Status();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return unavailable("rail {} did not come up", rail);
}

Status NetnsTestbed::set_rate(size_t rail, const std::string& rate) {
  const TestbedRail& r = rails_.at(rail);
  for (const auto& [ns, dev] : {std::pair{netns(r.a), interface(rail, true)}, std::pair{netns(r.b), interface(rail, false)}}) {
    DC_RETURN_IF_ERROR(
        ok(fmt::format("tc -n {} qdisc replace dev {} root tbf rate {} burst 256kb latency 20ms", ns, dev, rate)));
  }
  return Status();
}

Status NetnsTestbed::exec(const std::string& host, const std::string& command) const {
  return ok(fmt::format("ip netns exec {} sh -c '{}'", netns(host), command));
}

void NetnsTestbed::teardown() {
  wans_.clear();  // the relays stop before their namespace goes
  for (const auto& h : hosts_) (void)ok("ip netns del " + netns(h) + " 2>/dev/null");
  if (!planes_.empty()) (void)ok("ip netns del " + switch_netns() + " 2>/dev/null");
  // The safety route goes when the last testbed of this process does and no other run's remain.
  if (--g_instances == 0) {
    auto list = run("ip netns list");
    if (list.ok() && list->find(kNamePrefix) == std::string::npos) (void)ok("ip route del blackhole 198.18.0.0/15");
  }
}

NetnsTestbed::~NetnsTestbed() { teardown(); }

}  // namespace deltacast
