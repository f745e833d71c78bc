// Transparent huge pages for the simulator's heap. A simulation of tens of thousands of GPUs
// holds gigabytes of small objects (channels, sprayers' copies, events, relays' slice tables) and
// touches them in no particular order: with 4 KiB pages nearly every such touch also misses the
// TLB. glibc's malloc backs its heap with huge pages only when its tunable asks for it
// (glibc.malloc.hugetlb=1: madvise on what it maps), only in the main heap (a thread's own arena
// never gets them), and it reads tunables once, as the process starts; so the simulate command,
// when it runs one simulation at a time, runs itself again with the tunable added and every
// thread's allocations kept in the main heap (glibc.malloc.arena_max=1). With simulations side
// by side the one heap's lock costs more than the pages gain (8,192 GPUs, 4 GB, --jobs 2: 58 s
// against 53-57 s). Measured in benchmarks/README.md ("Huge pages").
#pragma once

#include <cstdint>

namespace deltacast::bench {

// For a process that runs one simulation at a time: replaces it by itself with
// glibc.malloc.hugetlb=1 and glibc.malloc.arena_max=1 added to GLIBC_TUNABLES, when the kernel
// offers transparent huge pages on request and GLIBC_TUNABLES does not already say anything about
// hugetlb (a caller's choice, glibc.malloc.hugetlb=0 included, stands). Returns only when it does
// not (or the exec failed, which changes nothing but speed). Call before any thread starts.
void rerun_with_huge_pages();

// Whether this process's malloc asks for huge pages (the tunable is set, or the kernel gives them
// to every mapping); memory_use() says how much it got.
bool heap_asks_for_huge_pages();

struct MemoryUse {
  uint64_t peak_resident_bytes = 0;
  uint64_t huge_page_bytes = 0;  // in transparent huge pages now
};
MemoryUse memory_use();

}  // namespace deltacast::bench
