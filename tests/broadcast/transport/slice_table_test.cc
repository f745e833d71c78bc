// The sender's slice table: a slice's checksum goes out with every copy until it is delivered and
// never after; pages of checksums come and go with the slices pending in them; and the table
// agrees with a plain per-slice reference on random sequences of offers, sends, losses, skips,
// slices wanted again after a skip, and deliveries.
#include "broadcast/transport/slice_table.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <random>

namespace deltacast {
namespace {

const TimePoint kStart{};

TransferShape shape_of(uint32_t slices) { return TransferShape{7, uint64_t{slices} * 100, 100}; }

TEST(SliceTable, AChecksumGoesOutUntilItsSliceIsDeliveredAndNotAfter) {
  SliceTable table;
  table.open(shape_of(3000), kStart);
  ASSERT_TRUE(table.offer(5, kStart, 0xabcull));
  ASSERT_TRUE(table.offer(2047, kStart, 0xdefull));  // another page
  ASSERT_TRUE(table.offer(6, kStart));               // offered without one: its channel hashes it
  EXPECT_TRUE(table.has_checksum(5));
  EXPECT_EQ(table.checksum(5), 0xabcull);
  EXPECT_EQ(table.checksum(2047), 0xdefull);
  EXPECT_FALSE(table.has_checksum(6));
  // Lost and queued again: still sent with it.
  ASSERT_EQ(table.next_queued(), 5u);
  table.take(5);
  table.add_copy(5);
  table.drop_copy(5);
  ASSERT_TRUE(table.requeue(5));
  EXPECT_TRUE(table.has_checksum(5));
  EXPECT_EQ(table.checksum(5), 0xabcull);
  ASSERT_TRUE(table.deliver(5, kStart));
  EXPECT_FALSE(table.has_checksum(5)) << "a delivered slice sent again (a probe) must be hashed from its bytes";
  EXPECT_FALSE(table.offer(5, kStart, 1)) << "offered twice";
  EXPECT_EQ(table.checksum(2047), 0xdefull) << "another page's checksum went with the first";
  // A skipped slice takes its checksum with it too.
  ASSERT_TRUE(table.skip(2047, kStart));
  EXPECT_FALSE(table.has_checksum(2047));
  EXPECT_EQ(table.delivered_for_probe(), std::optional<uint32_t>(5u)) << "skipped slices are never probed";
}

TEST(SliceTable, ASkippedSliceWantedAgainGoesOnceOfferedAndACopyInFlightCounts) {
  SliceTable table;
  table.open(shape_of(4), kStart);
  for (uint32_t i = 0; i < 4; ++i) ASSERT_TRUE(table.offer(i, kStart));
  // Slice 0 goes out, then the receiver is to get it elsewhere; slice 1 is skipped while queued.
  ASSERT_EQ(table.next_queued(), 0u);
  table.take(0);
  table.add_copy(0);
  ASSERT_TRUE(table.skip(0, kStart));
  ASSERT_TRUE(table.skip(1, kStart));
  ASSERT_TRUE(table.skip(2, kStart));
  ASSERT_TRUE(table.deliver(3, kStart));
  EXPECT_TRUE(table.finished());
  EXPECT_FALSE(table.unskip(3, kStart)) << "a delivered slice is not wanted again";
  // Wanted after all: not done, and not sent before it is offered again.
  ASSERT_TRUE(table.unskip(0, kStart));
  ASSERT_TRUE(table.unskip(1, kStart));
  EXPECT_FALSE(table.unskip(1, kStart));
  EXPECT_FALSE(table.finished());
  EXPECT_EQ(table.done_count(), 2u);
  EXPECT_EQ(table.next_queued(), std::nullopt) << "slice 1's stale queue entry named a slice not offered again";
  ASSERT_TRUE(table.offer(1, kStart));
  ASSERT_TRUE(table.offer(0, kStart));
  EXPECT_EQ(table.next_queued(), std::optional<uint32_t>(1u)) << "slice 0's copy is still in flight";
  table.take(1);
  EXPECT_EQ(table.next_queued(), std::nullopt);
  // The copy sent before the skip arrives: delivered, as if never skipped.
  ASSERT_TRUE(table.deliver(0, kStart));
  ASSERT_TRUE(table.deliver(1, kStart));
  EXPECT_TRUE(table.delivered(0));
  EXPECT_TRUE(table.finished());
  EXPECT_EQ(table.offered_count(), 4u);
}

// The reference: what the table kept per slice before it packed them.
struct Reference {
  std::vector<bool> offered, done, skipped;
  std::vector<int> live;
  std::map<uint32_t, uint64_t> checksum;
  explicit Reference(uint32_t n) : offered(n), done(n), skipped(n), live(n) {}
};

TEST(SliceTable, AgreesWithAPlainReferenceOnRandomSequences) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 20; ++round) {
    const uint32_t n = 1 + static_cast<uint32_t>(rng() % 5000);
    SliceTable table;
    table.open(shape_of(n), kStart);
    Reference ref(n);
    for (int op = 0; op < 20000; ++op) {
      const uint32_t s = static_cast<uint32_t>(rng() % n);
      switch (rng() % 7) {
        case 0: {  // offer, half with a checksum
          const bool with = rng() % 2 == 0;
          const uint64_t value = rng();
          const bool fresh = !ref.offered[s];
          ASSERT_EQ(table.offer(s, kStart, with ? std::optional<uint64_t>(value) : std::nullopt), fresh);
          if (fresh) {
            ref.offered[s] = true;
            if (with && !ref.done[s]) ref.checksum[s] = value;
          }
          break;
        }
        case 1:  // a copy in flight, then lost
          if (auto q = table.next_queued()) {
            ASSERT_TRUE(ref.offered[*q] && !ref.done[*q]) << "slice " << *q << " was not to be sent";
            table.take(*q);
            table.add_copy(*q);
            ++ref.live[*q];
          }
          break;
        case 2:
          if (ref.live[s] > 0) {
            table.drop_copy(s);
            --ref.live[s];
            (void)table.requeue(s);
          }
          break;
        case 3: {
          const bool fresh = !ref.done[s];
          ASSERT_EQ(table.deliver(s, kStart), fresh);
          if (fresh) {
            ref.done[s] = true;
            ref.checksum.erase(s);
          }
          break;
        }
        case 4: {
          const bool fresh = !ref.done[s];
          ASSERT_EQ(table.skip(s, kStart), fresh);
          if (fresh) {
            ref.done[s] = ref.skipped[s] = ref.offered[s] = true;
            ref.checksum.erase(s);
          }
          break;
        }
        case 5: {  // wanted again after a skip
          const bool fresh = ref.skipped[s];
          ASSERT_EQ(table.unskip(s, kStart), fresh);
          if (fresh) ref.done[s] = ref.skipped[s] = ref.offered[s] = false;
          break;
        }
        default: {
          const auto it = ref.checksum.find(s);
          ASSERT_EQ(table.has_checksum(s), it != ref.checksum.end()) << "slice " << s;
          if (it != ref.checksum.end()) {
            ASSERT_EQ(table.checksum(s), it->second) << "slice " << s;
          }
        }
      }
    }
    uint32_t offered = 0, done = 0;
    for (uint32_t s = 0; s < n; ++s) {
      offered += ref.offered[s];
      done += ref.done[s];
      const auto it = ref.checksum.find(s);
      ASSERT_EQ(table.has_checksum(s), it != ref.checksum.end()) << "slice " << s;
      if (it != ref.checksum.end()) {
        ASSERT_EQ(table.checksum(s), it->second);
      }
    }
    EXPECT_EQ(table.offered_count(), offered);
    EXPECT_EQ(table.done_count(), done);
    EXPECT_EQ(table.finished(), done == n);
  }
}

}  // namespace
}  // namespace deltacast
