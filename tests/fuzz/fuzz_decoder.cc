// libFuzzer target: a bucket from untrusted bytes. Each input is tried twice,
// as it is and re-sealed (checksums recomputed, as a deliberate forger would),
// so that mutations reach the chunk decoder instead of dying at the checksum.
// Whatever happens: no crash, no sanitizer report, nothing written outside
// the target tensors (guard bytes), and a rejected bucket leaves the targets
// untouched.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/byte_io.h"
#include "core/hash.h"
#include "fuzz_manifest.h"
#include "sparse/delta_applier.h"
#include "sparse/format.h"

namespace {

using namespace deltacast;

constexpr size_t kGuard = 64;
constexpr uint8_t kGuardByte = 0xA5;

struct Targets {
  explicit Targets(const Manifest& m) {
    for (const auto& spec : m.tensors()) {
      const size_t bytes = spec.nbytes();
      storage.emplace_back(bytes + 2 * kGuard, kGuardByte);
      // Deterministic content so that "untouched" can be checked.
      for (size_t i = 0; i < bytes; ++i) storage.back()[kGuard + i] = static_cast<uint8_t>(i * 131 + 7);
      views.push_back(TensorView{storage.back().data() + kGuard, spec.dtype, spec.numel(), Device{}});
    }
    pristine = storage;
  }
  void check_guards() const {
    for (const auto& s : storage) {
      for (size_t i = 0; i < kGuard; ++i) {
        if (s[i] != kGuardByte || s[s.size() - 1 - i] != kGuardByte) std::abort();  // wrote outside a tensor
      }
    }
  }
  void check_untouched() const {
    if (storage != pristine) std::abort();  // a rejected version changed a target
  }
  void reset() { storage = pristine; }

  std::vector<std::vector<uint8_t>> storage, pristine;
  std::vector<TensorView> views;
};

const Manifest& manifest() {
  static const Manifest m = fuzz::fuzz_manifest();
  return m;
}

void try_bucket(const std::vector<uint8_t>& bucket, Targets& targets) {
  static const DeltaApplier applier(manifest(), 1);
  const std::span<const uint8_t> spans[1] = {bucket};
  std::optional<uint64_t> held;
  if (bucket.size() >= BucketHeader::kBytes) held = load_le<uint64_t>(bucket.data() + 16);  // its own base
  for (const auto& holding : {held, std::optional<uint64_t>{}}) {
    targets.reset();
    auto verified = applier.verify(spans, holding);
    if (!verified.ok()) {
      targets.check_untouched();
      continue;
    }
    (void)applier.apply(*verified, targets.views);
    targets.check_guards();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Targets targets(manifest());
  std::vector<uint8_t> bucket(data, data + size);
  try_bucket(bucket, targets);
  if (bucket.size() >= BucketHeader::kBytes) {
    store_le<uint64_t>(bucket.data() + 56, content_hash(bucket.data() + BucketHeader::kBytes, bucket.size() - BucketHeader::kBytes));
    store_le<uint64_t>(bucket.data() + 64, xxh3_64(bucket.data(), 64));
    try_bucket(bucket, targets);
  }
  return 0;
}
