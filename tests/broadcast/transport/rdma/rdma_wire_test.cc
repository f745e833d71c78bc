// The RDMA wire's untrusted parts: connection private data, offers and
// replies are refused unless well formed, and an offer never names a slot the
// connection lacks or more bytes than the receiver takes, whatever the bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "broadcast/transport/rail.h"
#include "broadcast/transport/rdma/transport.h"
#include "broadcast/transport/rdma/verbs/slot_table.h"
#include "broadcast/transport/rdma/wire.h"
#include "broadcast/transport/transport_select.h"

namespace deltacast::rdma {
namespace {

TEST(RdmaWire, ConnectAcceptAndProofRoundTrip) {
  const trust::Hello client = trust::fresh_hello(trust::Protection::kAuthenticated, trust::Purpose::kData).value();
  const trust::Hello server = trust::fresh_hello(trust::Protection::kInsecure, trust::Purpose::kData).value();
  uint8_t hello[kConnectBytes];
  static_assert(kConnectBytes <= 56, "all an RDMA connect request holds");
  encode_connect(ConnectData{3, client}, hello);
  auto c = decode_connect(hello, sizeof(hello));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->rail_index, 3u);
  EXPECT_EQ(c->hello.nonce, client.nonce);
  EXPECT_EQ(c->hello.mode, trust::Protection::kAuthenticated);
  trust::Proof proof;
  for (size_t i = 0; i < proof.size(); ++i) proof[i] = static_cast<uint8_t>(3 * i + 1);
  uint8_t reply[kAcceptBytes];
  encode_accept(AcceptData{8, 64u << 20, server, proof}, reply);
  auto a = decode_accept(reply, sizeof(reply));
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->slot_count, 8u);
  EXPECT_EQ(a->max_slice_bytes, 64u << 20);
  EXPECT_EQ(a->hello.nonce, server.nonce);
  EXPECT_EQ(a->hello.mode, trust::Protection::kInsecure);
  EXPECT_EQ(a->proof, proof);
  uint8_t message[kOfferBytes];
  encode_proof(proof, message);
  auto p = decode_proof(message, sizeof(message));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, proof);
}

TEST(RdmaWire, MalformedConnectionDataIsRefused) {
  const trust::Hello client = trust::fresh_hello(trust::Protection::kAuthenticated, trust::Purpose::kData).value();
  uint8_t hello[kConnectBytes];
  encode_connect(ConnectData{0, client}, hello);
  EXPECT_FALSE(decode_connect(hello, kConnectBytes - 1).ok()) << "short";
  EXPECT_FALSE(decode_connect(nullptr, 0).ok()) << "none at all (another program's connect)";
  hello[0] ^= 1;
  EXPECT_FALSE(decode_connect(hello, sizeof(hello)).ok()) << "bad magic";
  hello[0] ^= 1;
  hello[4] = 9;
  EXPECT_EQ(decode_connect(hello, sizeof(hello)).status().code(), StatusCode::kMismatch) << "other protocol";
  encode_connect(ConnectData{0, client}, hello);
  hello[16] ^= 1;  // the hello's magic: a peer without authentication
  EXPECT_EQ(decode_connect(hello, sizeof(hello)).status().code(), StatusCode::kPermissionDenied);
  uint8_t reply[kAcceptBytes];
  encode_accept(AcceptData{0, 4096, client, {}}, reply);
  EXPECT_FALSE(decode_accept(reply, sizeof(reply)).ok()) << "no slots";
  encode_accept(AcceptData{(1u << 16) + 1, 4096, client, {}}, reply);
  EXPECT_FALSE(decode_accept(reply, sizeof(reply)).ok()) << "more slots than an immediate can name";
  encode_accept(AcceptData{4, 0, client, {}}, reply);
  EXPECT_FALSE(decode_accept(reply, sizeof(reply)).ok()) << "no slice fits";
  encode_accept(AcceptData{4, 4096, client, {}}, reply);
  EXPECT_FALSE(decode_accept(reply, kAcceptBytes - 1).ok()) << "the proof cut off";
  uint8_t message[kOfferBytes];
  encode_proof(trust::Proof{}, message);
  EXPECT_EQ(decode_proof(message, kOfferBytes - 1).status().code(), StatusCode::kPermissionDenied) << "short";
  encode_offer(SliceRef{1, 4096, 4096, 0, 4096, 0}, 1, message);
  EXPECT_EQ(decode_proof(message, kOfferBytes).status().code(), StatusCode::kPermissionDenied)
      << "an offer before the proof";
}

TEST(RdmaWire, AnOffersTagCoversItsHeaderAndPayloadUnderItsNumber) {
  const trust::GroupSecret secret = trust::GroupSecret::from_legacy_token(5);
  const trust::Hello client = trust::fresh_hello(trust::Protection::kAuthenticated, trust::Purpose::kData).value();
  const trust::Hello server = trust::fresh_hello(trust::Protection::kAuthenticated, trust::Purpose::kData).value();
  const trust::SessionKeys keys = trust::derive_keys(secret, client, server, trust::Protection::kAuthenticated).value();
  Dialed sender;
  sender.seal = std::move(trust::seals_for(keys, trust::Role::kClient).outgoing);
  std::vector<uint8_t> payload(4096);
  std::mt19937 rng(3);
  for (auto& b : payload) b = static_cast<uint8_t>(rng());
  uint8_t first[kOfferBytes], second[kOfferBytes];
  const SliceRef slice{9, 8192, 4096, 0, 4096, 0x77};
  encode_offer(slice, 1, first);
  sender.tag_offer(first, payload.data(), 4096);
  encode_offer(slice, 1, second);
  sender.tag_offer(second, payload.data(), 4096);
  EXPECT_NE(std::memcmp(first + kOfferTaggedBytes, second + kOfferTaggedBytes, trust::kTagBytes), 0)
      << "the same offer twice carries two tags (its number differs)";
  const auto holds = [&](uint64_t number, const uint8_t* offer, const std::vector<uint8_t>& bytes) {
    auto seal = std::move(trust::seals_for(keys, trust::Role::kServer).incoming);
    return seal->check_numbered(number, offer, kOfferTaggedBytes, bytes.data(), bytes.size(),
                                offer + kOfferTaggedBytes);
  };
  EXPECT_TRUE(holds(1, second, payload));
  EXPECT_TRUE(holds(0, first, payload));
  EXPECT_FALSE(holds(1, first, payload)) << "an offer replayed in another place";
  std::vector<uint8_t> forged = payload;
  forged[4000] ^= 2;
  EXPECT_FALSE(holds(0, first, forged)) << "a payload altered on the way";
  uint8_t altered[kOfferBytes];
  std::memcpy(altered, first, kOfferBytes);
  altered[20] ^= 1;  // in the slice header
  EXPECT_FALSE(holds(0, altered, payload)) << "a header altered on the way";
}

TEST(RdmaWire, EncryptedSessionsAreRefusedOnRdmaAndAutoPicksTcpForThem) {
  RdmaTransport rdma;
  ChannelOptions channel;
  channel.trust.protection = trust::Protection::kEncrypted;
  auto rail = parse_rail("127.0.0.1=127.0.0.1:1", 0);
  ASSERT_TRUE(rail.ok());
  auto connected = rdma.connect(*rail, channel);
  ASSERT_FALSE(connected.ok());
  EXPECT_EQ(connected.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(connected.status().message().find("TCP rails"), std::string::npos) << connected.status().to_string();
  ListenOptions listen;
  listen.trust.protection = trust::Protection::kEncrypted;
  auto listening = rdma.listen({Endpoint{"127.0.0.1", 0}}, nullptr, listen);
  ASSERT_FALSE(listening.ok());
  EXPECT_EQ(listening.status().code(), StatusCode::kPermissionDenied);
  // "auto" means TCP for an encrypted session (no fallback to report); "rdma" stays what was asked.
  auto chosen = open_transport("auto", /*encrypted=*/true);
  ASSERT_TRUE(chosen.ok());
  EXPECT_EQ(chosen->transport->name(), "tcp");
  EXPECT_TRUE(chosen->fallback.empty()) << chosen->fallback;
  EXPECT_FALSE(open_transport("infiniband").ok());
}

TEST(RdmaWire, OffersAreCheckedAgainstTheSlotsAndTheLimit) {
  const uint32_t slots = 8, limit = 4096;
  SliceRef slice{7, 1 << 20, 4096, 3, 4096, 0x55};
  uint8_t offer[kOfferBytes];
  encode_offer(slice, verbs::SlotTable::immediate(2, 1), offer);
  auto back = decode_offer(offer, sizeof(offer), slots, limit);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->imm, verbs::SlotTable::immediate(2, 1));
  EXPECT_EQ(back->slice.transfer, 7u);
  EXPECT_EQ(back->slice.index, 3u);
  EXPECT_EQ(back->slice.length, 4096u);
  EXPECT_EQ(back->slice.checksum, 0x55u);
  EXPECT_FALSE(decode_offer(offer, sizeof(offer) - 1, slots, limit).ok()) << "short";
  EXPECT_FALSE(decode_offer(offer, sizeof(offer), 2, limit).ok()) << "a slot the connection does not have";
  EXPECT_FALSE(decode_offer(offer, sizeof(offer), slots, limit - 1).ok()) << "a slice over the limit";
  slice.length = 0;
  encode_offer(slice, 1, offer);
  EXPECT_FALSE(decode_offer(offer, sizeof(offer), slots, limit).ok()) << "an empty slice";
  encode_offer(SliceRef{7, 1 << 20, 4096, 3, 4096, 0x55}, 1, offer);
  offer[0] ^= 1;
  EXPECT_FALSE(decode_offer(offer, sizeof(offer), slots, limit).ok()) << "bad magic";
}

TEST(RdmaWire, RandomOfferBytesNeverNameTooMuchOrAMissingSlot) {
  std::mt19937_64 rng(5);
  const uint32_t slots = 8, limit = 8192;
  uint8_t offer[kOfferBytes];
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    for (auto& b : offer) b = static_cast<uint8_t>(rng());
    if (i % 2 == 0) {  // half with a valid prefix, so the slot and length checks themselves are tested
      SliceRef forged{rng(), rng(), static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng()),
                      static_cast<uint32_t>(rng() % (2 * limit)), rng()};
      encode_offer(forged, verbs::SlotTable::immediate(static_cast<uint32_t>(rng() % (2 * slots)), 1), offer);
    }
    auto o = decode_offer(offer, sizeof(offer), slots, limit);
    if (!o.ok()) continue;
    ++accepted;
    ASSERT_GT(o->slice.length, 0u);
    ASSERT_LE(o->slice.length, limit);
    ASSERT_LT(verbs::SlotTable::slot_of(o->imm), slots);
  }
  EXPECT_GT(accepted, 0) << "forged offers with small lengths pass the wire check (the sink judges the rest)";
}

TEST(RdmaWire, RepliesRoundTripAndGarbageIsRefused) {
  uint8_t reply[kReplyBytes];
  encode_reply(Reply{0x30001, ReplyKind::kGranted, 0x7f0012345000, 0xbeef}, reply);
  auto r = decode_reply(reply, sizeof(reply));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->imm, 0x30001u);
  EXPECT_EQ(r->kind, ReplyKind::kGranted);
  EXPECT_EQ(r->address, 0x7f0012345000u);
  EXPECT_EQ(r->rkey, 0xbeefu);
  encode_reply(Reply{0x30001, ReplyKind::kRejected}, reply);
  EXPECT_EQ(decode_reply(reply, sizeof(reply))->kind, ReplyKind::kRejected);
  EXPECT_FALSE(decode_reply(reply, sizeof(reply) - 1).ok());
  reply[8] = 7;
  EXPECT_FALSE(decode_reply(reply, sizeof(reply)).ok()) << "an unknown kind";
  reply[8] = 0;
  reply[1] ^= 1;
  EXPECT_FALSE(decode_reply(reply, sizeof(reply)).ok()) << "bad magic";
}

}  // namespace
}  // namespace deltacast::rdma
