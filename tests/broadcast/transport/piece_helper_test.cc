// The helper thread a connection end hands its payload's per-byte work to: pieces run in the order
// posted, a ticket's piece is done when wait() returns, and a frame sealed or opened through the
// helper is the same, byte for byte and tag for tag, as one sealed or opened inline.
#include "broadcast/transport/piece_helper.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/hash.h"
#include "core/trust/frame_seal.h"
#include "support/random_bytes.h"

namespace deltacast {
namespace {

using testing::random_bytes;

TEST(PieceHelper, RunsPiecesInTheOrderPostedAndWaitsForATicket) {
  PieceHelper helper;
  std::vector<size_t> seen;
  std::vector<uint8_t> bytes(64);
  helper.begin([&](const uint8_t* in, uint8_t*, size_t) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // slower than posting: the queue fills
    seen.push_back(static_cast<size_t>(in - bytes.data()));
  });
  std::vector<uint64_t> tickets;
  for (size_t i = 0; i < bytes.size(); ++i) tickets.push_back(helper.post(bytes.data() + i, nullptr, 1));
  helper.wait(tickets[10]);
  EXPECT_GE(seen.size(), 11u);  // read after wait(): the helper's writes happened before it returned
  helper.drain();
  ASSERT_EQ(seen.size(), bytes.size());
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], i);
  for (size_t i = 1; i < tickets.size(); ++i) EXPECT_EQ(tickets[i], tickets[i - 1] + 1);
}

TEST(PieceHelper, ANewFrameWithPiecesPendingIsRefused) {
  PieceHelper helper;
  std::atomic<bool> go{false};
  helper.begin([&](const uint8_t*, uint8_t*, size_t) {
    while (!go) std::this_thread::yield();
  });
  helper.post(nullptr, nullptr, 0);
  EXPECT_THROW(helper.begin([](const uint8_t*, uint8_t*, size_t) {}), std::logic_error);
  go = true;
  helper.drain();
  helper.begin([](const uint8_t*, uint8_t*, size_t) {});
}

// What the TCP backend does with it: each piece through the seal and the hash on the helper. The
// reference is the same frame through a seal of the same key, inline.
TEST(PieceHelper, AFrameSealedAndOpenedOnTheHelperIsTheOneSealedInline) {
  for (const auto mode : {trust::Protection::kAuthenticated, trust::Protection::kEncrypted}) {
    SCOPED_TRACE(trust::protection_name(mode));
    const auto secret = trust::GroupSecret::from_legacy_token(7);
    const auto keys = trust::derive_keys(secret, trust::fresh_hello(mode, trust::Purpose::kData).value(),
                                         trust::fresh_hello(mode, trust::Purpose::kData).value(), mode)
                          .value();
    PieceHelper helper;
    for (const size_t bytes : {size_t{0}, size_t{1}, size_t{4096}, size_t{(3 << 18) + 5}}) {
      SCOPED_TRACE(bytes);
      // Each frame the first of its session (sequence 0) on every end.
      auto inline_end = trust::seals_for(keys, trust::Role::kClient);
      auto helped_end = trust::seals_for(keys, trust::Role::kClient);
      const auto header = random_bytes(48, static_cast<uint32_t>(bytes));
      const auto plain = random_bytes(bytes, static_cast<uint32_t>(bytes) + 1);
      constexpr size_t kPiece = 100 << 10;

      std::vector<uint8_t> want(plain);
      uint8_t want_tag[trust::kTagBytes];
      inline_end.outgoing->begin(header.data(), header.size());
      for (size_t at = 0; at < bytes; at += kPiece) {
        inline_end.outgoing->add(want.data() + at, want.data() + at, std::min(kPiece, bytes - at));
      }
      inline_end.outgoing->finish(want_tag);

      std::vector<uint8_t> got(bytes);
      uint8_t got_tag[trust::kTagBytes];
      ContentHashStream hash;
      hash.reset();
      helped_end.outgoing->begin(header.data(), header.size());
      helper.begin([&](const uint8_t* in, uint8_t* out, size_t n) {
        helped_end.outgoing->add(in, out, n);
        hash.update(in, n);
      });
      for (size_t at = 0; at < bytes; at += kPiece) helper.post(plain.data() + at, got.data() + at, std::min(kPiece, bytes - at));
      helper.drain();
      helped_end.outgoing->finish(got_tag);
      if (mode == trust::Protection::kAuthenticated) got = plain;  // tagged only: nothing written
      EXPECT_EQ(got, want);
      EXPECT_EQ(std::memcmp(got_tag, want_tag, sizeof(got_tag)), 0);
      EXPECT_EQ(hash.digest(), content_hash(plain.data(), plain.size()));

      // Opened on the helper, in place, as the listener does; then one byte altered fails.
      for (const bool alter : {false, true}) {
        std::vector<uint8_t> landed(want);
        if (alter && !landed.empty()) landed[landed.size() / 2] ^= 1;
        // A frame that fails leaves its seal unusable: each try gets a fresh one.
        auto opener = trust::seals_for(keys, trust::Role::kServer);
        auto& seal = *opener.incoming;
        seal.begin_open(header.data(), header.size());
        helper.begin([&](const uint8_t* in, uint8_t* out, size_t n) { seal.add_open(in, out, n); });
        for (size_t at = 0; at < bytes; at += kPiece) {
          helper.post(landed.data() + at, landed.data() + at, std::min(kPiece, bytes - at));
        }
        helper.drain();
        const bool ok = seal.check(want_tag);
        EXPECT_EQ(ok, !(alter && bytes > 0));
        if (ok) {
          EXPECT_EQ(landed, plain);
        }
      }
    }
  }
}

}  // namespace
}  // namespace deltacast
