// The RDMA wire's untrusted parts: connection private data, slot headers and
// acknowledgements are refused unless well formed, and a slot header never
// names more bytes than its slot holds, whatever the bytes.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "broadcast/transport/rdma/wire.h"

namespace deltacast::rdma {
namespace {

TEST(RdmaWire, ConnectAndAcceptRoundTrip) {
  uint8_t hello[kConnectBytes];
  encode_connect(ConnectData{0xabcdef, 3}, hello);
  auto c = decode_connect(hello, sizeof(hello));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->token, 0xabcdefu);
  EXPECT_EQ(c->rail_index, 3u);
  uint8_t reply[kAcceptBytes];
  encode_accept(AcceptData{0x7f0000001000, 0x1234, 8, (4u << 20) + 64}, reply);
  auto a = decode_accept(reply, sizeof(reply));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->slots_address, 0x7f0000001000u);
  EXPECT_EQ(a->rkey, 0x1234u);
  EXPECT_EQ(a->slot_count, 8u);
}

TEST(RdmaWire, MalformedConnectionDataIsRefused) {
  uint8_t hello[kConnectBytes];
  encode_connect(ConnectData{1, 0}, hello);
  EXPECT_FALSE(decode_connect(hello, kConnectBytes - 1).ok()) << "short";
  EXPECT_FALSE(decode_connect(nullptr, 0).ok()) << "none at all (another program's connect)";
  hello[0] ^= 1;
  EXPECT_FALSE(decode_connect(hello, sizeof(hello)).ok()) << "bad magic";
  hello[0] ^= 1;
  hello[4] = 9;
  EXPECT_EQ(decode_connect(hello, sizeof(hello)).status().code(), StatusCode::kMismatch) << "other protocol";
  uint8_t reply[kAcceptBytes];
  encode_accept(AcceptData{1, 1, 0, 4096}, reply);
  EXPECT_FALSE(decode_accept(reply, sizeof(reply)).ok()) << "no slots";
  encode_accept(AcceptData{1, 1, 4, 64}, reply);
  EXPECT_FALSE(decode_accept(reply, sizeof(reply)).ok()) << "slots with no room for a payload";
}

TEST(RdmaWire, SlotHeadersAreCheckedAgainstTheWriteAndTheSlot) {
  const uint32_t slot_bytes = 64 + 4096;
  SliceRef slice{7, 1 << 20, 4096, 3, 4096, 0x55};
  uint8_t header[kSlotHeaderBytes];
  encode_slot_header(slice, 0x10002, header);
  auto back = decode_slot_header(header, 0x10002, slot_bytes);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->transfer, 7u);
  EXPECT_EQ(back->index, 3u);
  EXPECT_EQ(back->length, 4096u);
  EXPECT_EQ(back->checksum, 0x55u);
  EXPECT_FALSE(decode_slot_header(header, 0x20002, slot_bytes).ok()) << "a header left from the slot's previous use";
  EXPECT_FALSE(decode_slot_header(header, 0x10002, slot_bytes - 1).ok()) << "a payload longer than the slot";
  slice.length = 0;
  encode_slot_header(slice, 1, header);
  EXPECT_FALSE(decode_slot_header(header, 1, slot_bytes).ok()) << "an empty slice";
}

TEST(RdmaWire, RandomSlotBytesNeverPassForAnOversizedSlice) {
  std::mt19937_64 rng(5);
  const uint32_t slot_bytes = 64 + 8192;
  uint8_t header[kSlotHeaderBytes];
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    for (auto& b : header) b = static_cast<uint8_t>(rng());
    const uint32_t imm = static_cast<uint32_t>(rng());
    if (i % 2 == 0) {  // half with a valid prefix, so the length check itself is what is tested
      SliceRef forged{rng(), rng(), static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng()),
                      static_cast<uint32_t>(rng() % (2 * slot_bytes)), rng()};
      encode_slot_header(forged, imm, header);
    }
    auto s = decode_slot_header(header, imm, slot_bytes);
    if (!s.ok()) continue;
    ++accepted;
    ASSERT_GT(s->length, 0u);
    ASSERT_LE(s->length, slot_bytes - kSlotHeaderBytes);
  }
  EXPECT_GT(accepted, 0) << "forged headers with small lengths pass the wire check (the sink judges the rest)";
}

TEST(RdmaWire, AcknowledgementsRoundTripAndGarbageIsRefused) {
  uint8_t ack[kAckBytes];
  encode_ack(0x30001, true, ack);
  auto a = decode_ack(ack, sizeof(ack));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->imm, 0x30001u);
  EXPECT_TRUE(a->accepted);
  encode_ack(0x30001, false, ack);
  EXPECT_FALSE(decode_ack(ack, sizeof(ack))->accepted);
  EXPECT_FALSE(decode_ack(ack, sizeof(ack) - 1).ok());
  ack[8] = 7;
  EXPECT_FALSE(decode_ack(ack, sizeof(ack)).ok());
}

}  // namespace
}  // namespace deltacast::rdma
