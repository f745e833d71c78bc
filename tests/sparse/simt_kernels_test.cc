// The GPU kernels' logic (sparse/cuda/*_simt.h, pfor_warp.h) run on the host
// through simt::HostWarp / HostBlock and held to the CPU codec: same PFOR
// bytes, same chunk bytes, same shadow, same decode verdicts and writes. On a
// GPU the very same templates run with the lanes in parallel
// (tests/cuda/gpu_parity_test.cc checks that).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "sparse/chunk_decoder.h"
#include "sparse/chunk_encoder.h"
#include "sparse/cuda/chunk_decode_simt.h"
#include "sparse/cuda/chunk_encode_simt.h"
#include "sparse/cuda/pfor_warp.h"
#include "sparse/pfor.h"
#include "support/reserved_bytes.h"
#include "support/test_tensors.h"

namespace deltacast {
namespace {

using simt::HostBlock;
using simt::HostWarp;

std::vector<uint64_t> random_block(std::mt19937_64& rng, unsigned n) {
  std::vector<uint64_t> v(n);
  const int kind = static_cast<int>(rng() % 5);
  std::geometric_distribution<uint64_t> geo(0.01);
  for (auto& x : v) {
    switch (kind) {
      case 0:
        x = 0;
        break;
      case 1:
        x = geo(rng);
        break;
      case 2:
        x = rng() % 3 + ((rng() % 20 == 0) ? rng() >> (rng() % 60) : 0);
        break;
      case 3:
        x = rng() >> (rng() % 64);
        break;
      default:
        x = ~uint64_t{0} - rng() % 2;
        break;
    }
  }
  return v;
}

TEST(SimtPfor, WarpEncodeMatchesCpuBytesAndDecodes) {
  std::mt19937_64 rng(1);
  simt::PforWarpScratch scratch;
  simt::PforDecodeScratch decode;
  for (int trial = 0; trial < 3000; ++trial) {
    const unsigned n = 1 + static_cast<unsigned>(rng() % 128);
    const auto values = random_block(rng, n);
    std::vector<uint8_t> cpu(pfor_max_block_bytes(n)), warp(pfor_max_block_bytes(n), 0xEE);
    cpu.resize(pfor_encode_block(values.data(), n, cpu.data()));
    const size_t written = simt::warp_pfor_encode(HostWarp{}, values.data(), n, warp.data(), scratch);
    ASSERT_EQ(written, cpu.size()) << "trial " << trial;
    ASSERT_TRUE(std::equal(cpu.begin(), cpu.end(), warp.begin())) << "trial " << trial;
    std::vector<uint64_t> back(n);
    ASSERT_EQ(simt::warp_pfor_decode(HostWarp{}, cpu.data(), cpu.size(), n, back.data(), decode), cpu.size());
    ASSERT_EQ(back, values);
  }
}

TEST(SimtPfor, WarpDecodeRejectsWhatTheCpuRejects) {
  std::mt19937_64 rng(2);
  simt::PforDecodeScratch scratch;
  int rejected = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const unsigned n = 1 + static_cast<unsigned>(rng() % 128);
    const auto values = random_block(rng, n);
    std::vector<uint8_t> bytes(pfor_max_block_bytes(n));
    bytes.resize(pfor_encode_block(values.data(), n, bytes.data()));
    // Mutate a few bytes, or cut the block short.
    if (rng() % 4 == 0) {
      bytes.resize(rng() % bytes.size());
    } else {
      for (int e = 0; e < 1 + static_cast<int>(rng() % 3); ++e)
        bytes[rng() % bytes.size()] = static_cast<uint8_t>(rng());
    }
    std::vector<uint64_t> cpu(n), warp(n);
    size_t cpu_used = 0;
    const bool cpu_ok = pfor_decode_block(bytes, n, cpu.data(), &cpu_used).ok();
    const size_t warp_used = simt::warp_pfor_decode(HostWarp{}, bytes.data(), bytes.size(), n, warp.data(), scratch);
    ASSERT_EQ(cpu_ok, warp_used != 0) << "trial " << trial;
    if (cpu_ok) {
      ASSERT_EQ(cpu_used, warp_used);
      ASSERT_EQ(cpu, warp);
    } else {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 5000);
}

// Exception positions that rise pairwise in places but repeat (5, 7, 5, 7): lanes 1 and 3 would both
// add to value 7. Both decoders refuse the block; the warp decoder checks every position before any
// lane writes (compute-sanitizer's racecheck flagged the two writes on an H200).
TEST(SimtPfor, RepeatedExceptionPositionsAreRefusedBeforeAnyWrite) {
  const unsigned n = 16;
  std::vector<uint64_t> values(n, 1);
  for (unsigned at : {2u, 5u, 7u, 9u}) values[at] = uint64_t{1} << 20;  // four exceptions above width 1
  std::vector<uint8_t> bytes(pfor_max_block_bytes(n));
  bytes.resize(pfor_encode_block(values.data(), n, bytes.data()));
  ASSERT_EQ(bytes[1], 4) << "the block should carry four exceptions";
  const size_t positions = 3 + packed_bytes(n, bytes[0]);
  ASSERT_EQ(std::vector<uint8_t>(bytes.begin() + positions, bytes.begin() + positions + 4),
            (std::vector<uint8_t>{2, 5, 7, 9}));
  const uint8_t forged[] = {5, 7, 5, 7};
  std::memcpy(bytes.data() + positions, forged, sizeof forged);
  std::vector<uint64_t> cpu(n), warp(n);
  size_t used = 0;
  EXPECT_FALSE(pfor_decode_block(bytes, n, cpu.data(), &used).ok());
  simt::PforDecodeScratch scratch;
  EXPECT_EQ(simt::warp_pfor_decode(HostWarp{}, bytes.data(), bytes.size(), n, warp.data(), scratch), 0u);
}

// Encodes one chunk both ways: CPU (diff + encode_delta_chunk) and the block template.
struct ChunkCase {
  DType dtype;
  ValueCodec codec;
  uint64_t count;
  double density;
};

template <typename U>
void check_chunk(const ChunkCase& c, std::mt19937_64& rng) {
  const unsigned size = sizeof(U);
  testing::GuardedTensor base(c.dtype, c.count), current(c.dtype, c.count);
  testing::fill_random_bits(base, rng);
  current.copy_from(base);
  const uint64_t changes = c.density < 0 ? 1 : static_cast<uint64_t>(c.density * static_cast<double>(c.count));
  testing::apply_random_changes(current, changes, rng);

  std::vector<uint8_t> cpu_shadow(base.bytes().begin(), base.bytes().end());
  ChunkScratch scratch;
  diff_and_update(current.data(), cpu_shadow.data(), c.count, size, &scratch.diff);
  ByteBuffer cpu;
  const ValueCodec effective = effective_value_codec(c.codec, c.dtype);
  const ChunkRange range{3, c.dtype, 1000, c.count};
  encode_delta_chunk(range, current.data(), scratch.diff, c.codec, 0, &scratch, &cpu);

  std::vector<uint8_t> gpu_shadow(base.bytes().begin(), base.bytes().end());
  std::vector<uint8_t> out(ChunkHeader::kBytes + c.count * size + 8, 0xEE);
  uint64_t out_size = 0, changed = 0;
  const simt::EncodeJob job{current.data(),
                            gpu_shadow.data(),
                            out.data(),
                            &out_size,
                            &changed,
                            1000,
                            static_cast<uint32_t>(c.count),
                            3,
                            static_cast<uint8_t>(effective)};
  auto shared = std::make_unique<simt::EncodeShared<U>>();
  simt::encode_chunk<U>(HostBlock{simt::kEncodeThreads}, *shared, job);

  SCOPED_TRACE(::testing::Message() << dtype_name(c.dtype) << " " << value_codec_name(c.codec) << " count " << c.count
                                    << " density " << c.density);
  EXPECT_EQ(changed, scratch.diff.count);
  EXPECT_EQ(gpu_shadow, cpu_shadow) << "the shadow must become the current version";
  ASSERT_EQ(out_size, cpu.size());
  EXPECT_TRUE(std::equal(cpu.data(), cpu.data() + cpu.size(), out.begin())) << "chunk bytes differ";
}

TEST(SimtEncoder, BlockEncoderMatchesCpuChunkBytes) {
  std::mt19937_64 rng(3);
  for (DType dtype : kAllDTypes) {
    for (ValueCodec codec : {ValueCodec::kRaw, ValueCodec::kUlp}) {
      for (uint64_t count : {uint64_t{1}, uint64_t{127}, uint64_t{5000}, uint64_t{40000}}) {
        for (double density : {0.0, -1.0, 0.001, 0.01, 0.1, 0.5, 1.0}) {
          const ChunkCase c{dtype, codec, count, density};
          switch (dtype_size(dtype)) {
            case 1:
              check_chunk<uint8_t>(c, rng);
              break;
            case 2:
              check_chunk<uint16_t>(c, rng);
              break;
            case 4:
              check_chunk<uint32_t>(c, rng);
              break;
            default:
              check_chunk<uint64_t>(c, rng);
              break;
          }
        }
      }
    }
  }
}

// How the apply pass gets its changes (GpuApplier: kept where the device has room, else decoded again).
enum class ApplyFrom { kDecodingAgain, kKeptChanges };

// The GPU applier's passes (sparse/cuda/gpu_applier.cu) in its order, on the host: walk every
// sparse job, check every group, place every job's groups, and only then apply the groups and
// copy the dense pieces. Returns the first error found (0: applied).
struct HostVersionDecode {
  std::vector<simt::DecodeJob> jobs;  // the sparse ones first, as the applier orders them
  uint32_t sparse = 0;
  uint64_t groups = 0;

  void add_sparse(std::span<const uint8_t> body, uint8_t* target, uint64_t count, uint64_t nnz, DType dtype,
                  uint8_t codec) {
    ASSERT_EQ(sparse, jobs.size()) << "sparse jobs go first";
    jobs.push_back(
        {body.data(), body.size(), target, count, nnz, groups, static_cast<uint8_t>(dtype_size(dtype)), 0, codec, 0});
    ++sparse;
    groups += simt::group_count(nnz);
  }
  void add_dense(std::span<const uint8_t> body, uint8_t* target, DType dtype) {
    const auto size = static_cast<uint8_t>(dtype_size(dtype));
    jobs.push_back({body.data(), body.size(), target, body.size() / size, body.size() / size, 0, size, 1, 0, 0});
  }

  uint32_t verify_and_apply(ApplyFrom from = ApplyFrom::kDecodingAgain) {
    // Filled with what no walk writes, so that an entry it missed shows.
    std::vector<simt::GroupEntry> directory(groups);
    std::memset(static_cast<void*>(directory.data()), 0xff, directory.size() * sizeof(simt::GroupEntry));
    auto scratch = std::make_unique<simt::GroupScratch>();
    // Kept changes: slots filled with what no check writes either, so that a slot it missed shows.
    const bool keep = from == ApplyFrom::kKeptChanges;
    std::vector<uint32_t> offsets;
    std::vector<uint8_t> values;
    if (keep) {
      uint64_t value_bytes = 0;
      for (uint32_t j = 0; j < sparse; ++j) {
        EXPECT_TRUE(simt::keepable(jobs[j])) << "job " << j;
        jobs[j].kept_values = value_bytes;
        value_bytes += simt::kept_value_bytes(jobs[j].nnz, jobs[j].elem_size);
      }
      offsets.assign(groups * kPforBlockValues, 0xffffffffu);
      values.assign(value_bytes, 0xa5);
    }
    const simt::KeptChanges kept{offsets.data(), values.data()};
    for (uint32_t j = 0; j < sparse; ++j) {
      if (const uint32_t code = simt::walk_groups(jobs[j], j, directory.data()); code != simt::kDecodeOk) return code;
    }
    for (uint64_t g = 0; g < groups; ++g) {
      simt::GroupEntry& e = directory[g];
      if (e.job >= sparse) {
        ADD_FAILURE() << "a directory entry the walk did not fill";
        return simt::kDecodeBadJob;
      }
      const uint32_t code = simt::warp_check_group(HostWarp{}, jobs[e.job], e, *scratch, g, keep ? kept : simt::KeptChanges{});
      if (code != simt::kDecodeOk) return code;
    }
    for (uint32_t j = 0; j < sparse; ++j) {
      const uint32_t code = simt::warp_place_groups(HostWarp{}, jobs[j], directory.data(), *scratch);
      if (code != simt::kDecodeOk) return code;
    }
    if (keep) {
      for (uint64_t slot = 0; slot < offsets.size(); ++slot) {
        const simt::GroupEntry& e = directory[slot / kPforBlockValues];
        EXPECT_EQ(offsets[slot] == 0xffffffffu, slot % kPforBlockValues >= e.n) << "slot " << slot;
        EXPECT_EQ(simt::apply_kept_change(jobs.data(), directory.data(), kept, slot), simt::kDecodeOk);
      }
    }
    for (const simt::GroupEntry& e : keep ? std::span<const simt::GroupEntry>() : directory) {
      const uint32_t code = simt::warp_apply_group(HostWarp{}, jobs[e.job], e, *scratch);
      EXPECT_EQ(code, simt::kDecodeOk) << "a verified group failed to apply";
    }
    for (size_t j = sparse; j < jobs.size(); ++j) {
      EXPECT_EQ(simt::warp_copy_piece(HostWarp{}, jobs[j]), simt::kDecodeOk);
    }
    return simt::kDecodeOk;
  }
};

// One chunk's delta from the CPU encoder: its header and raw body.
struct EncodedChunk {
  ChunkHeader header;
  std::vector<uint8_t> body;
};

EncodedChunk encode_chunk_on_cpu(const testing::GuardedTensor& base, const testing::GuardedTensor& current,
                                 ValueCodec codec, EncodedAs expected = EncodedAs::kSparse) {
  const DType dtype = base.view().dtype;
  const uint64_t count = base.view().numel;
  std::vector<uint8_t> shadow(base.bytes().begin(), base.bytes().end());
  ChunkScratch enc;
  diff_and_update(current.data(), shadow.data(), count, dtype_size(dtype), &enc.diff);
  ByteBuffer chunk;
  EXPECT_EQ(encode_delta_chunk({0, dtype, 0, count}, current.data(), enc.diff, codec, 0, &enc, &chunk), expected);
  EncodedChunk out{*ChunkHeader::parse(chunk.span()), {}};
  out.body.assign(chunk.data() + ChunkHeader::kBytes, chunk.data() + ChunkHeader::kBytes + out.header.raw_body_bytes);
  return out;
}

// A sparse chunk encoded by the CPU, then decoded by the warp passes: same verdict, same result.
TEST(SimtDecoder, WarpPassesMatchCpuOnValidAndForgedBodies) {
  std::mt19937_64 rng(4);
  int compared = 0, rejected = 0;
  for (DType dtype : {DType::kBF16, DType::kF32, DType::kI8, DType::kF64, DType::kI16}) {
    for (ValueCodec codec : {ValueCodec::kRaw, ValueCodec::kUlp}) {
      const uint64_t count = 30000;
      testing::GuardedTensor base(dtype, count), current(dtype, count);
      testing::fill_random_bits(base, rng);
      current.copy_from(base);
      testing::apply_random_changes(current, count / 50, rng);
      const EncodedChunk chunk = encode_chunk_on_cpu(base, current, codec);
      for (int trial = 0; trial < 300; ++trial) {
        std::vector<uint8_t> forged = chunk.body;
        if (trial > 0) {  // trial 0 is the valid body
          for (int e = 0; e < 1 + static_cast<int>(rng() % 3); ++e)
            forged[rng() % forged.size()] = static_cast<uint8_t>(rng());
        }
        ChunkHeader h = chunk.header;
        h.raw_body_bytes = h.body_bytes = forged.size();
        const bool cpu_ok = verify_chunk_body(h, forged, dtype).ok();
        testing::GuardedTensor cpu_target(dtype, count);
        cpu_target.copy_from(base);
        if (cpu_ok) {
          ASSERT_TRUE(apply_chunk_body(h, forged, cpu_target.view()).ok());
        }
        ++compared;
        rejected += cpu_ok ? 0 : 1;
        for (ApplyFrom from : {ApplyFrom::kDecodingAgain, ApplyFrom::kKeptChanges}) {
          SCOPED_TRACE(from == ApplyFrom::kKeptChanges ? "changes kept" : "decoded again");
          testing::GuardedTensor warp_target(dtype, count);
          warp_target.copy_from(base);
          HostVersionDecode decode;
          decode.add_sparse(forged, warp_target.data(), count, h.nnz, dtype, h.value_codec);
          const uint32_t verdict = decode.verify_and_apply(from);
          ASSERT_EQ(cpu_ok, verdict == simt::kDecodeOk) << "trial " << trial << ": " << simt::decode_error_name(verdict);
          ASSERT_TRUE(warp_target.guards_intact());
          if (!cpu_ok) {
            ASSERT_TRUE(warp_target.same_bits(base)) << "a verify pass wrote into the target, trial " << trial;
            continue;
          }
          ASSERT_TRUE(warp_target.same_bits(cpu_target)) << "trial " << trial;
          if (trial == 0) {
            ASSERT_TRUE(warp_target.same_bits(current));
          }
        }
      }
    }
  }
  EXPECT_GT(rejected, compared / 4);  // edits inside raw values still decode: only structure breaks
}

// Several chunks of several dtypes in one directory, one with more groups than a warp has lanes
// (the place pass scans them 32 at a time), and a dense piece: the version applies like the CPU
// decoder, with the changes decoded again and kept (each dtype's values in an area of its own).
TEST(SimtDecoder, ManyGroupsAndChunksShareOneDirectory) {
  std::mt19937_64 rng(6);
  const uint64_t counts[] = {300000, 5000, 1, 9000, 70000};
  const double densities[] = {0.03, 0.2, 1.0, 0.05, 0.001};
  const DType dtypes[] = {DType::kBF16, DType::kI8, DType::kBF16, DType::kF64, DType::kF32};
  const ValueCodec codecs[] = {ValueCodec::kUlp, ValueCodec::kUlp, ValueCodec::kRaw, ValueCodec::kUlp, ValueCodec::kRaw};
  constexpr size_t kDense = 2;  // a one-element change is not smaller sparse: that one goes dense
  std::vector<testing::GuardedTensor> bases, currents;
  std::vector<EncodedChunk> chunks;
  for (size_t i = 0; i < std::size(counts); ++i) {
    bases.emplace_back(dtypes[i], counts[i]);
    currents.emplace_back(dtypes[i], counts[i]);
    testing::fill_random_bits(bases[i], rng);
    currents[i].copy_from(bases[i]);
    testing::apply_random_changes(
        currents[i], std::max<uint64_t>(1, static_cast<uint64_t>(static_cast<double>(counts[i]) * densities[i])), rng);
    if (i != kDense) chunks.push_back(encode_chunk_on_cpu(bases[i], currents[i], codecs[i]));
  }
  EXPECT_GT(simt::group_count(chunks[0].header.nnz), 2 * simt::kWarpSize);
  for (ApplyFrom from : {ApplyFrom::kDecodingAgain, ApplyFrom::kKeptChanges}) {
    SCOPED_TRACE(from == ApplyFrom::kKeptChanges ? "changes kept" : "decoded again");
    std::vector<testing::GuardedTensor> targets;
    for (size_t i = 0; i < std::size(counts); ++i) {
      targets.emplace_back(dtypes[i], counts[i]);
      targets[i].copy_from(bases[i]);
    }
    HostVersionDecode decode;
    for (size_t i = 0, c = 0; i < std::size(counts); ++i) {
      if (i == kDense) continue;
      decode.add_sparse(chunks[c].body, targets[i].data(), counts[i], chunks[c].header.nnz, dtypes[i],
                        chunks[c].header.value_codec);
      ++c;
    }
    decode.add_dense(currents[kDense].bytes(), targets[kDense].data(), dtypes[kDense]);
    ASSERT_EQ(decode.verify_and_apply(from), simt::kDecodeOk);
    for (size_t i = 0; i < std::size(counts); ++i) {
      EXPECT_TRUE(targets[i].same_bits(currents[i])) << "chunk " << i;
      EXPECT_TRUE(targets[i].guards_intact()) << "chunk " << i;
    }
  }
}

// Bodies built by hand whose gaps only go wrong when summed, in every place a sum is taken: within
// a lane's changes, across the lanes of a group, across the groups of a chunk. Sums that wrap
// around 2^64 must not make a position look small. The CPU decoder is held to the same verdicts.
TEST(SimtDecoder, GapSumsBeyondTheChunkAreRejectedWithoutWrapping) {
  const auto body_of = [](const std::vector<std::vector<uint64_t>>& group_gaps) {
    std::vector<uint8_t> body;
    for (const auto& gaps : group_gaps) {
      std::vector<uint8_t> block(pfor_max_block_bytes(static_cast<unsigned>(gaps.size())));
      block.resize(pfor_encode_block(gaps.data(), static_cast<unsigned>(gaps.size()), block.data()));
      body.insert(body.end(), block.begin(), block.end());
      body.insert(body.end(), gaps.size(), 0x7f);  // raw u8 values
    }
    return body;
  };
  const uint64_t top = uint64_t{1} << 63;
  std::vector<uint64_t> spread(128, 0);
  spread[127] = 500;  // the group covers 628 positions: alone it fits 1000, two of them do not
  std::vector<uint64_t> far(128, 0);
  far[0] = top - 200;  // covers 2^63 - 72 positions: three of them wrap around 2^64
  // 32 groups that fit (a place batch), then two far ones: each batch's sum fits in 64 bits, the
  // two together wrap to 2^63 + 3752.
  std::vector<std::vector<uint64_t>> batches(31, std::vector<uint64_t>(128, 0));
  batches.insert(batches.begin(), far);
  batches.push_back(far);
  batches.push_back(far);
  struct Case {
    const char* what;
    uint64_t count;
    std::vector<std::vector<uint64_t>> groups;
    bool valid;
  };
  const std::vector<Case> cases = {
      {"one group that fits", 1000, {spread}, true},
      {"two groups that each fit", 1000, {spread, spread}, false},
      {"gap + 1 wraps to 0", 1000, {{~uint64_t{0}, 5}}, false},
      {"two gaps of one lane sum to 2^64 + 2", 1000, {{top, top}}, false},
      {"two lanes' sums wrap in the scan", 1000, {{top, 0, 0, 0, top}}, false},
      {"gaps near 2^62 in a chunk of 2^62 elements",
       uint64_t{1} << 62,
       {{(uint64_t{1} << 62) - 1, (uint64_t{1} << 62) - 1, (uint64_t{1} << 62) - 1, (uint64_t{1} << 62) - 1, 10}},
       false},
      {"three groups' spans wrap in the place scan", top + 1000, {far, far, far}, false},
      {"spans wrap between the place pass's batches of 32 groups", top + 10000, batches, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::vector<uint8_t> body = body_of(c.groups);
    uint64_t nnz = 0;
    for (const auto& g : c.groups) nnz += g.size();
    ChunkHeader h;
    h.kind = ChunkKind::kSparse;
    h.value_codec = static_cast<uint8_t>(ValueCodec::kRaw);
    h.element_count = c.count;
    h.nnz = nnz;
    h.raw_body_bytes = h.body_bytes = body.size();
    EXPECT_EQ(verify_chunk_body(h, body, DType::kU8).ok(), c.valid) << "the CPU decoder";
    // The target is 1000 elements: a body wrongly accepted for a larger chunk writes outside it.
    // Changes are kept only for chunks of at most 2^32 elements (their offsets are 32-bit).
    std::vector<ApplyFrom> ways = {ApplyFrom::kDecodingAgain};
    if (c.count <= (uint64_t{1} << 32)) ways.push_back(ApplyFrom::kKeptChanges);
    for (ApplyFrom from : ways) {
      testing::GuardedTensor target(DType::kU8, 1000);
      HostVersionDecode decode;
      decode.add_sparse(body, target.data(), c.count, nnz, DType::kU8, h.value_codec);
      EXPECT_EQ(decode.verify_and_apply(from), c.valid ? simt::kDecodeOk : simt::kDecodePositionOutOfRange);
      EXPECT_TRUE(target.guards_intact());
      if (!c.valid) {
        EXPECT_TRUE(std::all_of(target.bytes().begin(), target.bytes().end(), [](uint8_t b) { return b == 0; }))
            << "a verify pass wrote into the target";
      }
    }
  }
}

// A chunk above 2^32 elements, changes on both sides of 2^31 and 2^32 and gaps above 2^31: the
// group passes keep positions 64-bit. The target is reserved, not committed: only written pages
// become memory.
TEST(SimtDecoder, ChunkAboveTwoToTheThirtyTwoElements) {
  const uint64_t count = (uint64_t{1} << 32) + 4099;
  std::vector<uint64_t> positions = {0,        1, (uint64_t{1} << 31) - 1, uint64_t{1} << 31, (uint64_t{1} << 32) + 7,
                                     count - 1};
  for (uint64_t k = 0; k < 300; ++k) positions.push_back(k * 13000000 + 17);  // crosses both and spans groups
  std::sort(positions.begin(), positions.end());
  positions.erase(std::unique(positions.begin(), positions.end()), positions.end());
  std::vector<uint8_t> body;
  uint64_t next = 0;
  for (size_t g = 0; g < positions.size(); g += 128) {
    const unsigned n = static_cast<unsigned>(std::min<size_t>(128, positions.size() - g));
    std::vector<uint64_t> gaps(n);
    for (unsigned k = 0; k < n; ++k) {
      gaps[k] = positions[g + k] - next;
      next = positions[g + k] + 1;
    }
    std::vector<uint8_t> block(pfor_max_block_bytes(n));
    block.resize(pfor_encode_block(gaps.data(), n, block.data()));
    body.insert(body.end(), block.begin(), block.end());
    for (unsigned k = 0; k < n; ++k) body.push_back(static_cast<uint8_t>(1 + (g + k) % 251));
  }
  ChunkHeader h;
  h.kind = ChunkKind::kSparse;
  h.value_codec = static_cast<uint8_t>(ValueCodec::kRaw);
  h.element_count = count;
  h.nnz = positions.size();
  h.raw_body_bytes = h.body_bytes = body.size();
  ASSERT_TRUE(verify_chunk_body(h, body, DType::kU8).ok());
  testing::ReservedBytes target(count);
  ASSERT_TRUE(target.ok());
  HostVersionDecode decode;
  decode.add_sparse(body, target.data(), count, h.nnz, DType::kU8, h.value_codec);
  EXPECT_FALSE(simt::keepable(decode.jobs[0])) << "its offsets need more than 32 bits: decoded again";
  ASSERT_EQ(decode.verify_and_apply(), simt::kDecodeOk);
  for (size_t k = 0; k < positions.size(); ++k) {
    ASSERT_EQ(target.data()[positions[k]], static_cast<uint8_t>(1 + k % 251)) << "position " << positions[k];
    if (positions[k] + 1 < count && (k + 1 == positions.size() || positions[k + 1] != positions[k] + 1)) {
      ASSERT_EQ(target.data()[positions[k] + 1], 0) << "after position " << positions[k];
    }
  }
}

}  // namespace
}  // namespace deltacast
