// The receiver's staging: exactly-once arrival, validation of untrusted slice
// headers, duplicates and checksum failures.
#include "broadcast/transport/staging.h"
#include "broadcast/transport/transfer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>

namespace deltacast {
namespace {

SliceRef slice_of(uint64_t transfer, uint64_t bytes, uint32_t slice_bytes, uint32_t index, const uint8_t* data) {
  SliceRef s{transfer, bytes, slice_bytes, index, 0, 0};
  s.length = static_cast<uint32_t>(std::min<uint64_t>(slice_bytes, bytes - s.offset()));
  s.checksum = content_hash(data + s.offset(), s.length);
  return s;
}

bool land(StagingArea& area, const SliceRef& s, const uint8_t* data) {
  auto landing = area.begin(s, nullptr);
  EXPECT_TRUE(landing.ok()) << landing.status().to_string();
  if (landing->bytes) std::memcpy(landing->bytes, data + s.offset(), s.length);
  return area.complete(s, *landing, landing->bytes == nullptr || checksum_matches(s, landing->bytes));
}

TEST(Staging, SlicesArriveExactlyOnceInAnyOrder) {
  std::vector<uint8_t> data(10000);
  std::iota(data.begin(), data.end(), 0);
  StagingArea area;
  ASSERT_TRUE(area.expect(7, data.size(), 0).ok());
  const uint32_t slice_bytes = 4096;
  for (uint32_t i : {2u, 0u, 2u, 1u, 0u}) EXPECT_TRUE(land(area, slice_of(7, data.size(), slice_bytes, i, data.data()), data.data()));
  EXPECT_TRUE(area.wait(7, Millis(100)).ok());
  const auto got = area.bytes(7);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), data.begin()));
  const TransferProgress p = area.progress(7);
  EXPECT_EQ(p.arrived, 3u);
  EXPECT_EQ(p.duplicates, 2u);
}

TEST(Staging, RejectsForgedHeadersBeforeWritingAnything) {
  std::vector<uint8_t> memory(8192, 0xEE);
  StagingArea area;
  ASSERT_TRUE(area.expect(1, 8000, 4096, memory.data()).ok());
  const std::vector<SliceRef> forged = {
      {2, 8000, 4096, 0, 4096, 0},       // unknown transfer
      {1, 8001, 4096, 0, 4096, 0},       // wrong transfer size
      {1, 8000, 2048, 0, 2048, 0},       // wrong slice size
      {1, 8000, 4096, 2, 4096, 0},       // index past the end
      {1, 8000, 4096, 1, 4096, 0},       // last slice claims the full size (it is 3904)
      {1, 8000, 4096, 0, 100, 0},        // short slice in the middle
      {1, 8000, 4096, 0xffffffffu, 1, 0},
  };
  for (const auto& s : forged) {
    EXPECT_FALSE(area.begin(s, nullptr).ok()) << s.index << " " << s.length;
  }
  for (uint8_t b : memory) ASSERT_EQ(b, 0xEE);
}

TEST(Staging, ChecksumFailureLeavesTheSliceMissingForAResend) {
  std::vector<uint8_t> data(5000, 3);
  StagingArea area;
  ASSERT_TRUE(area.expect(9, data.size(), 0).ok());
  SliceRef s = slice_of(9, data.size(), 4096, 0, data.data());
  auto landing = area.begin(s, nullptr);
  ASSERT_TRUE(landing.ok() && landing->bytes != nullptr);
  EXPECT_FALSE(area.complete(s, *landing, false));
  EXPECT_EQ(area.progress(9).rejected, 1u);
  // A copy that arrives while another is still being received is not acknowledged yet.
  auto first = area.begin(s, nullptr);
  auto second = area.begin(s, nullptr);
  ASSERT_TRUE(first->bytes != nullptr);
  EXPECT_EQ(second->bytes, nullptr);
  EXPECT_FALSE(area.complete(s, *second, true));
  std::memcpy(first->bytes, data.data(), s.length);
  EXPECT_TRUE(area.complete(s, *first, true));
  auto third = area.begin(s, nullptr);
  EXPECT_TRUE(area.complete(s, *third, true)) << "a duplicate of an arrived slice is acknowledged";
}

TEST(Staging, ANewerCopySupersedesAStalledOneOnceItStoppedWriting) {
  std::vector<uint8_t> data(8192, 9);
  StagingOptions options;
  options.takeover_after = Millis(20);
  StagingArea area(options);
  ASSERT_TRUE(area.expect(4, data.size(), 4096).ok());
  SliceRef s = slice_of(4, data.size(), 4096, 1, data.data());
  std::atomic<bool> first_cancelled{false};
  auto first = area.begin(s, [&] { first_cancelled = true; });
  ASSERT_TRUE(first.ok() && first->bytes != nullptr);
  auto early = area.begin(s, nullptr);
  EXPECT_EQ(early->bytes, nullptr) << "a copy right behind a live one is a duplicate";
  EXPECT_FALSE(first_cancelled);
  std::this_thread::sleep_for(Millis(30));
  // The aborted reader notices its cancelled connection and gives the slot back, as a backend's
  // reader thread does; only then may the newer copy write.
  std::atomic<bool> first_done{false};
  std::thread aborted([&] {
    while (!first_cancelled) std::this_thread::sleep_for(Millis(1));
    std::this_thread::sleep_for(Millis(10));
    first_done = true;
    EXPECT_FALSE(area.complete(s, *first, false));
  });
  auto second = area.begin(s, nullptr);
  aborted.join();
  ASSERT_TRUE(second->bytes != nullptr) << "after takeover_after the newer copy gets the slot";
  EXPECT_TRUE(first_cancelled);
  EXPECT_TRUE(first_done) << "the newer copy got the slot while the stalled one could still write";
  std::memcpy(second->bytes, data.data() + s.offset(), s.length);
  EXPECT_TRUE(area.complete(s, *second, true));
  EXPECT_EQ(area.progress(4).arrived, 1u);
  EXPECT_EQ(area.progress(4).rejected, 1u);
}

TEST(Staging, ACopyIsRefusedWhileAStalledOneWillNotStop) {
  std::vector<uint8_t> data(8192, 9);
  StagingOptions options;
  options.takeover_after = Millis(5);
  options.takeover_wait = Millis(30);
  StagingArea area(options);
  ASSERT_TRUE(area.expect(4, data.size(), 4096).ok());
  SliceRef s = slice_of(4, data.size(), 4096, 0, data.data());
  auto first = area.begin(s, [] {});
  ASSERT_TRUE(first.ok() && first->bytes != nullptr);
  std::this_thread::sleep_for(Millis(10));
  auto second = area.begin(s, nullptr);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->bytes, nullptr) << "two writers in one slot";
  EXPECT_FALSE(area.complete(s, *second, true));
  // The stalled copy did finish after all, verified: the slice is in.
  std::memcpy(first->bytes, data.data() + s.offset(), s.length);
  EXPECT_TRUE(area.complete(s, *first, true));
  EXPECT_EQ(area.progress(4).arrived, 1u);
}

TEST(Staging, ARunningReceiveKeepsTheCallersMemoryAfterForget) {
  std::vector<uint8_t> data(8192, 5);
  auto memory = std::make_shared<std::vector<uint8_t>>(data.size());
  std::weak_ptr<std::vector<uint8_t>> watch = memory;
  StagingArea area;
  ASSERT_TRUE(area.expect(9, data.size(), 4096, memory->data(), memory).ok());
  memory.reset();
  SliceRef s = slice_of(9, data.size(), 4096, 0, data.data());
  auto landing = area.begin(s, nullptr);
  ASSERT_TRUE(landing.ok() && landing->bytes != nullptr);
  area.forget(9);
  EXPECT_FALSE(watch.expired()) << "a receive is still writing into it";
  std::memcpy(landing->bytes, data.data(), s.length);
  (void)area.complete(s, *landing, true);
  landing = Result<Landing>(Landing{});
  EXPECT_TRUE(watch.expired());
}

TEST(Staging, AutoAcceptIsBounded) {
  StagingOptions options;
  options.auto_accept_bytes = 1 << 20;
  StagingArea area(options);
  EXPECT_TRUE(area.begin({5, 1 << 20, 65536, 0, 65536, 0}, nullptr).ok());
  EXPECT_FALSE(area.begin({6, (1 << 20) + 1, 65536, 0, 65536, 0}, nullptr).ok());
  EXPECT_FALSE(area.begin({7, 1 << 20, 100, 0, 100, 0}, nullptr).ok()) << "slice sizes below the minimum are refused";
}

TEST(Staging, WaitReportsProgressOnTimeout) {
  StagingArea area;
  ASSERT_TRUE(area.expect(3, 100000, 4096).ok());
  Status s = area.wait(3, Millis(20));
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("0 of 25 slices"), std::string::npos) << s.message();
}

// Slice checksums derived from a buffer's leaf digests are the ones hashing the slices gives,
// for every slice size that is whole leaves (the last slice short, or a single short slice);
// sizes that cut leaves, and leaves of another length, are refused.
TEST(TransferShape, SliceChecksumsFromLeavesAreTheSlicesContentHashes) {
  ThreadPool pool(2);
  std::mt19937 rng(4);
  for (const uint64_t bytes : {uint64_t{0}, uint64_t{1000}, uint64_t{kHashLeafBytes}, uint64_t{(3 << 20) + 12345}}) {
    std::vector<uint8_t> data(bytes);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    const std::vector<uint64_t> leaves = content_hash_leaves(data.data(), data.size(), pool);
    for (const uint32_t slice_bytes : {uint32_t{64} << 10, uint32_t{256} << 10, uint32_t{4} << 20}) {
      const TransferShape shape{1, bytes, slice_bytes};
      const auto derived = slice_checksums_from_leaves(leaves, shape);
      ASSERT_TRUE(derived.has_value()) << bytes << " in " << slice_bytes;
      EXPECT_EQ(*derived, slice_checksums(data.data(), shape, pool)) << bytes << " in " << slice_bytes;
      for (uint32_t i = 0; i < shape.slices(); ++i) {
        EXPECT_EQ((*derived)[i], content_hash(data.data() + shape.offset(i), shape.length(i)));
      }
      EXPECT_EQ(slice_checksums(data.data(), shape, leaves, pool), *derived);
    }
    const TransferShape cut{1, bytes, 48 << 10};
    EXPECT_FALSE(slice_checksums_from_leaves(leaves, cut).has_value());
    EXPECT_EQ(slice_checksums(data.data(), cut, leaves, pool), slice_checksums(data.data(), cut, pool));
    const std::vector<uint64_t> short_by_one(leaves.begin(), leaves.end() - 1);
    EXPECT_FALSE(slice_checksums_from_leaves(short_by_one, TransferShape{1, bytes, 64 << 10}).has_value());
  }
}

TEST(Staging, TheDigestComesFromTheVerifiedChecksumsAndKnowsTheirPlaces) {
  std::vector<uint8_t> data(40000);
  std::mt19937 rng(3);
  for (auto& b : data) b = static_cast<uint8_t>(rng());  // no two slices alike
  const uint32_t slice_bytes = 4096;
  const auto shape = TransferShape{5, data.size(), slice_bytes};
  ThreadPool pool(2);
  const uint64_t want = transfer_digest(slice_checksums(data.data(), shape, pool), data.size());

  StagingArea area;
  ASSERT_TRUE(area.expect(5, data.size(), slice_bytes).ok());
  EXPECT_FALSE(area.digest(5).ok());  // nothing arrived yet
  EXPECT_FALSE(area.digest(6).ok());  // not a transfer here
  for (uint32_t i = 0; i < shape.slices(); ++i) ASSERT_TRUE(land(area, slice_of(5, data.size(), slice_bytes, i, data.data()), data.data()));
  ASSERT_TRUE(area.digest(5).ok());
  EXPECT_EQ(*area.digest(5), want);

  // Slices 1 and 2 delivered in each other's places, each with the checksum of the bytes it
  // carries: every slice verifies, the digest does not.
  std::vector<uint8_t> swapped = data;
  std::swap_ranges(swapped.begin() + slice_bytes, swapped.begin() + 2 * slice_bytes, swapped.begin() + 2 * slice_bytes);
  StagingArea other;
  ASSERT_TRUE(other.expect(5, data.size(), slice_bytes).ok());
  for (uint32_t i = 0; i < shape.slices(); ++i) {
    ASSERT_TRUE(land(other, slice_of(5, data.size(), slice_bytes, i, swapped.data()), swapped.data()));
  }
  ASSERT_TRUE(other.digest(5).ok());
  EXPECT_NE(*other.digest(5), want);
}

}  // namespace
}  // namespace deltacast
