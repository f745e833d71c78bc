#include "simulate/huge_pages.h"

#include <gnu/libc-version.h>
#include <sys/auxv.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "broadcast/transport/rail.h"

namespace deltacast::bench {

namespace {

constexpr std::string_view kTunable = "glibc.malloc.hugetlb=";
// Set in the process run again: it never runs itself a third time, whatever glibc made of
// GLIBC_TUNABLES (it drops the variable for privileged programs).
constexpr const char* kRerun = "DELTACAST_SIMULATE_RERUN";

// glibc.malloc.hugetlb came with glibc 2.35; an older glibc ignores it.
bool glibc_knows_hugetlb() {
  unsigned major = 0, minor = 0;
  return std::sscanf(gnu_get_libc_version(), "%u.%u", &major, &minor) == 2 && (major > 2 || (major == 2 && minor >= 35));
}

// The kernel's transparent huge page mode: "always", "madvise" or "never" (empty: unknown).
std::string thp_mode() {
  const std::string modes = read_line("/sys/kernel/mm/transparent_hugepage/enabled");
  const size_t open = modes.find('['), close = modes.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return "";
  return modes.substr(open + 1, close - open - 1);
}

std::string tunables() {
  const char* value = std::getenv("GLIBC_TUNABLES");
  return value == nullptr ? "" : value;
}

}  // namespace

void rerun_with_huge_pages() {
  const std::string old = tunables();
  if (std::getenv(kRerun) != nullptr || getauxval(AT_SECURE) != 0 || !glibc_knows_hugetlb()) return;
  if (thp_mode() != "madvise" || old.find(kTunable) != std::string::npos) return;
  std::ifstream in("/proc/self/cmdline");
  const std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t at = 0; at < cmdline.size();) {
    const size_t end = cmdline.find('\0', at);
    args.push_back(cmdline.substr(at, end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  if (args.empty()) return;
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const std::string added = std::string(kTunable) + "1:glibc.malloc.arena_max=1";
  if (setenv("GLIBC_TUNABLES", (old.empty() ? added : old + ":" + added).c_str(), 1) != 0) return;
  setenv(kRerun, "1", 1);
  // By its own path, not /proc/self/exe: the process keeps its name (ps, top, pgrep).
  std::string self(4096, '\0');
  const ssize_t length = readlink("/proc/self/exe", self.data(), self.size() - 1);
  if (length > 0) execv(self.substr(0, static_cast<size_t>(length)).c_str(), argv.data());
  // Not replaced (no /proc?): go on as before, only slower.
  unsetenv(kRerun);
  if (old.empty()) {
    unsetenv("GLIBC_TUNABLES");
  } else {
    setenv("GLIBC_TUNABLES", old.c_str(), 1);
  }
}

bool heap_asks_for_huge_pages() {
  const std::string mode = thp_mode();
  if (mode == "always") return true;
  if (mode != "madvise" || !glibc_knows_hugetlb()) return false;
  const std::string set = tunables();
  const size_t at = set.find(kTunable);
  if (at == std::string::npos) return false;
  const size_t value = at + kTunable.size();
  return value < set.size() && set[value] != '0';
}

MemoryUse memory_use() {
  MemoryUse use;
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) == 0) use.peak_resident_bytes = static_cast<uint64_t>(usage.ru_maxrss) * 1024;
  std::ifstream in("/proc/self/smaps_rollup");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("AnonHugePages:", 0) != 0) continue;
    std::istringstream fields(line.substr(line.find(':') + 1));
    uint64_t kib = 0;
    fields >> kib;
    use.huge_page_bytes = kib * 1024;
  }
  return use;
}

}  // namespace deltacast::bench
