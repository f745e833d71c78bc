// The TCP backend over loopback: real sockets, several rails (127.0.0.x),
// byte-exact transfers, resets, wrong tokens, and hostile clients that must be
// dropped without touching staging or disturbing other connections.
// Multi-host behaviour with shaped links and cut cables is in tests/netns/.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "broadcast/transport/handshake.h"
#include "broadcast/transport/sprayer.h"
#include "broadcast/transport/staging.h"
#include "broadcast/transport/transfer.h"
#include "broadcast/transport/tcp/channel.h"
#include "broadcast/transport/tcp/listener.h"
#include "broadcast/transport/tcp/transport.h"
#include "core/byte_io.h"
#include "core/hash.h"
#include "core/thread_pool.h"
#include "support/test_trust.h"

namespace deltacast {
namespace {

using std::chrono::milliseconds;
constexpr uint64_t kToken = 0x5eed;

struct Receiver {
  StagingArea staging;
  std::unique_ptr<tcp::TcpListener> listener;

  explicit Receiver(int rails, ListenOptions options = {},
                    trust::Protection mode = trust::Protection::kAuthenticated,
                    PieceHelperMode helper = PieceHelperMode::kOff) {
    options.trust = testing::test_trust(kToken, mode);
    options.piece_helper = helper;
    std::vector<Endpoint> endpoints;
    for (int r = 0; r < rails; ++r) endpoints.push_back({"127.0.0." + std::to_string(11 + r), 0});
    listener = tcp::TcpListener::create(endpoints, &staging, options).value();
  }
};

std::unique_ptr<Sprayer> make_sender(const Receiver& rx, uint64_t token = kToken, uint32_t slice_bytes = 0,
                                     trust::Protection mode = trust::Protection::kAuthenticated,
                                     PieceHelperMode helper = PieceHelperMode::kOff) {
  tcp::TcpTransport transport;
  std::vector<std::unique_ptr<Channel>> channels;
  const auto endpoints = rx.listener->endpoints();
  for (size_t r = 0; r < endpoints.size(); ++r) {
    RailSpec rail{Endpoint{"127.0.0." + std::to_string(1 + r), 0}, endpoints[r], "rail" + std::to_string(r)};
    ChannelOptions options;
    options.trust = testing::test_trust(token, mode);
    options.rail_index = static_cast<uint32_t>(r);
    options.piece_helper = helper;
    channels.push_back(transport.connect(rail, options).value());
  }
  SprayOptions spray;
  spray.stall_timeout = milliseconds(1500);
  spray.slice_bytes = slice_bytes;
  return std::make_unique<Sprayer>(std::move(channels), spray);
}

std::vector<uint8_t> pattern(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const uint64_t r = rng();
    std::memcpy(v.data() + i, &r, 8);
  }
  return v;
}

TEST(TcpLoopback, TransfersAreByteExactOverSeveralRails) {
  Receiver rx(3);
  auto sender = make_sender(rx);
  for (uint64_t id : {1u, 2u}) {
    const auto data = pattern(48 << 20, id);
    ASSERT_TRUE(rx.staging.expect(id, data.size()).ok());
    auto r = sender->send(id, data.data(), data.size());
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_TRUE(rx.staging.wait(id, milliseconds(1000)).ok());
    const auto got = rx.staging.bytes(id);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), data.begin()));
  }
  for (const auto& t : sender->telemetry()) EXPECT_GT(t.bytes_acked, 0u) << t.name;
}

// Each end's payload work inline, or on its helper thread (piece_helper.h).
class TcpHelper : public ::testing::TestWithParam<PieceHelperMode> {};

std::string helper_name(const ::testing::TestParamInfo<PieceHelperMode>& mode) {
  return mode.param == PieceHelperMode::kOn ? "helped" : "inline";
}

TEST_P(TcpHelper, ResetMidTransferLosesNothing) {
  // Encrypted: a reset cuts frames whose pieces are being decrypted in place in the slot.
  Receiver rx(2, {}, trust::Protection::kEncrypted, GetParam());
  tcp::TcpTransport transport;
  std::vector<std::unique_ptr<Channel>> channels;
  std::vector<Channel*> raw;
  const auto endpoints = rx.listener->endpoints();
  for (size_t r = 0; r < 2; ++r) {
    ChannelOptions options;
    options.trust = testing::test_trust(kToken, trust::Protection::kEncrypted);
    options.piece_helper = GetParam();
    channels.push_back(transport.connect({Endpoint{"127.0.0.1", 0}, endpoints[r], "rail" + std::to_string(r)}, options).value());
    raw.push_back(channels.back().get());
  }
  Sprayer sender(std::move(channels), SprayOptions{});
  const auto data = pattern(64 << 20, 7);
  ASSERT_TRUE(rx.staging.expect(1, data.size()).ok());
  std::thread chaos([&] {
    for (int i = 0; i < 3; ++i) {
      std::this_thread::sleep_for(milliseconds(15));
      raw[i % 2]->reset();
    }
  });
  auto r = sender.send(1, data.data(), data.size());
  chaos.join();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE(rx.staging.wait(1, milliseconds(1000)).ok());
  const auto got = rx.staging.bytes(1);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), data.begin()));
  EXPECT_EQ(rx.staging.progress(1).arrived, rx.staging.progress(1).slices);
}

class TcpProtection : public ::testing::TestWithParam<std::tuple<trust::Protection, PieceHelperMode>> {};

TEST_P(TcpProtection, TransfersAreByteExactWithAndWithoutChecksumsAhead) {
  const auto [mode, helper] = GetParam();
  Receiver rx(2, {}, mode, helper);
  // Slices of 1 MiB + 3 bytes: several pieces each, the last one short (kHashedPieceBytes).
  const uint32_t slice = (1 << 20) + 3;
  auto sender = make_sender(rx, kToken, slice, mode, helper);
  const auto data = pattern((6 << 20) + 12345, 31);
  ASSERT_TRUE(rx.staging.expect(1, data.size(), slice).ok());
  // Checksums given (as a round gives them), then computed as the payload goes out.
  ThreadPool pool(1);
  const auto leaves = content_hash_leaves(data.data(), data.size(), pool);
  auto r = sender->send(1, data.data(), data.size(), leaves);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE(rx.staging.wait(1, milliseconds(2000)).ok());
  auto got = rx.staging.bytes(1);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), data.begin()));
  ASSERT_TRUE(rx.staging.expect(2, data.size(), slice).ok());
  r = sender->send(2, data.data(), data.size());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE(rx.staging.wait(2, milliseconds(2000)).ok());
  got = rx.staging.bytes(2);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), data.begin()));
  EXPECT_EQ(rx.staging.progress(2).rejected, 0u);
}

// A long session's key updates (frame_seal.h), crossed every 256 KiB: both ends of every
// connection move to the next key in step, mid-transfer, slices split across pieces and helpers.
TEST_P(TcpProtection, KeyUpdatesMidTransferKeepBothEndsInStep) {
  const auto [mode, helper] = GetParam();
  ListenOptions listen;
  listen.trust = testing::test_trust(kToken, mode);
  listen.trust.rekey_after_bytes = 256 << 10;
  listen.piece_helper = helper;
  StagingArea staging;
  auto listener = tcp::TcpListener::create({{"127.0.0.11", 0}, {"127.0.0.12", 0}}, &staging, listen).value();
  tcp::TcpTransport transport;
  std::vector<std::unique_ptr<Channel>> channels;
  for (size_t r = 0; r < 2; ++r) {
    ChannelOptions options;
    options.trust = listen.trust;
    options.rail_index = static_cast<uint32_t>(r);
    options.piece_helper = helper;
    channels.push_back(
        transport.connect({Endpoint{"127.0.0.1", 0}, listener->endpoints()[r], "rail" + std::to_string(r)}, options)
            .value());
  }
  SprayOptions spray;
  spray.slice_bytes = (300 << 10) + 5;  // slices that cross the mark in their middle
  Sprayer sender(std::move(channels), spray);
  const auto data = pattern((12 << 20) + 77, 41);
  for (uint64_t id : {1u, 2u}) {
    ASSERT_TRUE(staging.expect(id, data.size(), spray.slice_bytes).ok());
    auto r = sender.send(id, data.data(), data.size());
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_TRUE(staging.wait(id, milliseconds(2000)).ok());
    const auto got = staging.bytes(id);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), data.begin()));
    EXPECT_EQ(staging.progress(id).rejected, 0u);
  }
  // Nothing was dropped on the way: no connection failed a tag (about 48 key updates per rail;
  // TcpHandshake.SessionsMoveToTheNextKeyAtTheMarkTheTrustSets shows seals from these options do).
  for (const auto& drop : listener->recent_drops()) ADD_FAILURE() << drop;
}

std::shared_ptr<const trust::LeafTags> leaf_tags_of(const std::vector<uint8_t>& data) {
  ThreadPool pool(2);
  return std::make_shared<const trust::LeafTags>(
      trust::make_leaf_tags(testing::test_trust(kToken).secret, data.data(), data.size(), pool).value());
}

// Leaf tags made with the bytes (as a producer makes them): an authenticated session sends them
// in place of tagging each payload, and the receiver checks each leaf; the other modes send as
// without them (encrypted: the payload is still encrypted). Every mode lands the bytes exact.
TEST_P(TcpProtection, LeafTaggedTransfersAreByteExactInEveryMode) {
  const auto [mode, helper] = GetParam();
  Receiver rx(2, {}, mode, helper);
  const uint32_t slice = 1 << 20;  // slices on leaves; the last one and its last leaf short
  auto sender = make_sender(rx, kToken, slice, mode, helper);
  const auto data = pattern((6 << 20) + 12345, 37);
  ThreadPool pool(1);
  const auto leaves = content_hash_leaves(data.data(), data.size(), pool);
  ASSERT_TRUE(rx.staging.expect(1, data.size(), slice).ok());
  auto r = sender->send(1, data.data(), data.size(), leaves, leaf_tags_of(data));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE(rx.staging.wait(1, milliseconds(2000)).ok());
  const auto got = rx.staging.bytes(1);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), data.begin()));
  EXPECT_EQ(rx.staging.progress(1).rejected, 0u);
  for (const auto& drop : rx.listener->recent_drops()) ADD_FAILURE() << drop;
}

INSTANTIATE_TEST_SUITE_P(Modes, TcpProtection,
                         ::testing::Combine(::testing::Values(trust::Protection::kInsecure,
                                                              trust::Protection::kAuthenticated,
                                                              trust::Protection::kEncrypted),
                                            ::testing::Values(PieceHelperMode::kOff, PieceHelperMode::kOn)),
                         [](const ::testing::TestParamInfo<std::tuple<trust::Protection, PieceHelperMode>>& p) {
                           return std::string(trust::protection_name(std::get<0>(p.param))) +
                                  (std::get<1>(p.param) == PieceHelperMode::kOn ? "_helped" : "_inline");
                         });

TEST(TcpLoopback, LessProtectionThanTheReceiverRequiresIsRefusedNamingTheModes) {
  Receiver rx(1, {}, trust::Protection::kEncrypted);
  auto sender = make_sender(rx, kToken, 0, trust::Protection::kInsecure);
  const auto data = pattern(1 << 20, 3);
  ASSERT_TRUE(rx.staging.expect(1, data.size()).ok());
  ASSERT_FALSE(sender->send(1, data.data(), data.size()).ok());
  std::string all;
  for (const auto& d : rx.listener->recent_drops()) all += d + "\n";
  EXPECT_NE(all.find("the peer offers insecure; this side requires encrypted"), std::string::npos) << all;
  EXPECT_EQ(rx.staging.progress(1).arrived, 0u);
}

// Ends with different key-update marks would fall out of step at the smaller one: each hello
// says its mark, and the receiver refuses the connection naming both.
TEST(TcpLoopback, AnEndWithAnotherKeyUpdateMarkIsRefusedNamingBoth) {
  ListenOptions listen;
  listen.trust = testing::test_trust(kToken, trust::Protection::kEncrypted);
  StagingArea staging;
  auto listener = tcp::TcpListener::create({{"127.0.0.11", 0}}, &staging, listen).value();
  ChannelOptions options;
  options.trust = listen.trust;
  options.trust.rekey_after_bytes = 64 << 10;
  tcp::TcpTransport transport;
  auto channel = transport.connect({Endpoint{"127.0.0.1", 0}, listener->endpoints()[0], "rail0"}, options).value();
  bool named = false;
  for (int i = 0; i < 200 && !named; ++i) {
    for (const auto& d : listener->recent_drops()) {
      named |= d.find("the peer moves to a new key every 2^16 bytes; this side every 2^38") != std::string::npos;
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_TRUE(named);
  EXPECT_FALSE(channel->ready());
}

TEST(TcpLoopback, WrongSecretIsRefused) {
  Receiver rx(1);
  auto sender = make_sender(rx, kToken + 1);
  const auto data = pattern(1 << 20, 3);
  ASSERT_TRUE(rx.staging.expect(1, data.size()).ok());
  auto r = sender->send(1, data.data(), data.size());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not connected"), std::string::npos) << r.status().message();
  bool logged = false;
  for (const auto& d : rx.listener->recent_drops()) logged |= d.find("wrong secret") != std::string::npos;
  EXPECT_TRUE(logged);
  EXPECT_EQ(rx.staging.progress(1).arrived, 0u);
}

// A raw client that speaks (or mangles) the protocol by hand.
struct RawClient {
  int fd = -1;
  explicit RawClient(const Endpoint& to) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(to.port);
    inet_pton(AF_INET, to.host.c_str(), &a.sin_addr);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  }
  ~RawClient() { ::close(fd); }
  void put(const std::vector<uint8_t>& bytes) { ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size())); }
  // For a frame the receiver may drop before it has read all of it (the send then fails midway).
  void try_put(const std::vector<uint8_t>& bytes) { (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL); }
  // The trust handshake; false when it was refused.
  bool shake(uint64_t token = kToken) {
    auto s = net::shake_hands(fd, trust::Role::kClient, testing::test_trust(token), trust::Purpose::kData,
                              net::Clock::now() + milliseconds(2000));
    if (s.ok()) session = std::move(s).value();
    return s.ok();
  }
  void hello() {
    ASSERT_TRUE(shake());
    std::vector<uint8_t> h(tcp::kFrameHeaderBytes + 24);
    tcp::write_frame_header(h.data(), tcp::kHello);
    store_le<uint32_t>(h.data() + 8, tcp::kProtocolVersion);
    put_sealed(h, h.size());
    uint8_t ack[tcp::kFrameHeaderBytes + 8];
    ASSERT_EQ(recv(fd, ack, sizeof(ack), MSG_WAITALL), static_cast<ssize_t>(sizeof(ack)));
    ASSERT_TRUE(tcp::read_tag(fd, *session.seals.incoming, ack, sizeof(ack), net::Clock::now() + milliseconds(2000),
                              nullptr)
                    .ok());
  }
  // Seals `frame` as the session's next frame (its first `head` bytes are the header and body)
  // and sends it with its tag.
  std::vector<uint8_t> sealed(std::vector<uint8_t> frame, size_t head) {
    trust::FrameSeal& seal = *session.seals.outgoing;
    seal.begin(frame.data(), head);
    seal.add(frame.data() + head, frame.data() + head, frame.size() - head);
    uint8_t tag[trust::kTagBytes];
    seal.finish(tag);
    frame.insert(frame.end(), tag, tag + seal.overhead());
    return frame;
  }
  void put_sealed(const std::vector<uint8_t>& frame, size_t head) { put(sealed(frame, head)); }
  // Reads frames until an acknowledgement (skipping the receiver's heartbeats), each opened with
  // the session; returns its status (0 in place, 1 rejected) or -1 when the connection ended
  // first or a frame failed its tag.
  int read_ack() {
    for (;;) {
      uint8_t frame[tcp::kFrameHeaderBytes + 40];
      if (recv(fd, frame, tcp::kFrameHeaderBytes, MSG_WAITALL) != static_cast<ssize_t>(tcp::kFrameHeaderBytes)) return -1;
      const uint8_t type = frame[4];
      const size_t body = tcp::frame_body_bytes(type);
      if (body == 0 || recv(fd, frame + tcp::kFrameHeaderBytes, body, MSG_WAITALL) != static_cast<ssize_t>(body)) {
        return -1;
      }
      if (!tcp::read_tag(fd, *session.seals.incoming, frame, tcp::kFrameHeaderBytes + body,
                         net::Clock::now() + milliseconds(2000), nullptr)
               .ok()) {
        return -1;
      }
      if (type == tcp::kAck) return static_cast<int>(load_le<uint32_t>(frame + tcp::kFrameHeaderBytes + 12));
    }
  }
  net::Session session;
  std::vector<uint8_t> slice_frame(const SliceRef& s) {
    std::vector<uint8_t> f(tcp::kFrameHeaderBytes + 40);
    tcp::write_frame_header(f.data(), tcp::kSlice);
    encode_slice_header(s, f.data() + tcp::kFrameHeaderBytes);
    return f;
  }
  // True when the receiver closed the connection within `wait`.
  bool dropped(milliseconds wait) {
    timeval tv{static_cast<time_t>(wait.count() / 1000), static_cast<suseconds_t>((wait.count() % 1000) * 1000)};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    uint8_t buf[256];
    for (;;) {
      const ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return true;
      if (n < 0) return false;  // timed out while the connection stayed open
    }
  }
};

// A sender whose HELLO takes a while to arrive (a WAN's round trip) reads the HELLO_ACK first,
// not a heartbeat the receiver sent meanwhile: read as the ack, a heartbeat made the sender see
// the handshake refused, and across a 40 ms WAN most reconnections failed that way.
TEST(TcpLoopback, NoHeartbeatComesBeforeTheHelloAck) {
  Receiver rx(1);
  RawClient c(rx.listener->endpoints()[0]);
  ASSERT_TRUE(c.shake());
  std::this_thread::sleep_for(milliseconds(200));  // four of the receiver's heartbeat periods
  std::vector<uint8_t> h(tcp::kFrameHeaderBytes + 24);
  tcp::write_frame_header(h.data(), tcp::kHello);
  store_le<uint32_t>(h.data() + 8, tcp::kProtocolVersion);
  c.put_sealed(h, h.size());
  uint8_t ack[tcp::kFrameHeaderBytes + 8];
  ASSERT_EQ(recv(c.fd, ack, sizeof(ack), MSG_WAITALL), static_cast<ssize_t>(sizeof(ack)));
  ASSERT_TRUE(tcp::read_tag(c.fd, *c.session.seals.incoming, ack, sizeof(ack), net::Clock::now() + milliseconds(2000),
                            nullptr)
                  .ok());
  const auto header = tcp::parse_frame_header(ack);
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->type, tcp::kHelloAck);
}

TEST(TcpLoopback, HostileClientsAreDroppedAndOthersUnaffected) {
  ListenOptions options;
  options.frame_timeout = milliseconds(300);
  options.handshake_timeout = milliseconds(300);
  Receiver rx(1, options);
  const Endpoint at = rx.listener->endpoints()[0];
  // Staging for one legitimate transfer, inside a guarded buffer; its slice size is announced
  // (as the engine's control plane does), so hostile frames cannot choose the layout.
  const uint64_t bytes = 8 << 20;
  const uint32_t slice = 256 << 10;
  std::vector<uint8_t> memory(bytes + 4096, 0xA5);
  ASSERT_TRUE(rx.staging.expect(1, bytes, slice, memory.data() + 2048).ok());

  std::mt19937_64 rng(9);
  std::vector<uint8_t> noise(4096);
  for (auto& b : noise) b = static_cast<uint8_t>(rng());
  RawClient random_bytes(at);
  random_bytes.put(noise);
  RawClient bad_magic(at);
  bad_magic.hello();
  bad_magic.put(std::vector<uint8_t>(32, 0x11));
  RawClient wrong_token(at);
  EXPECT_FALSE(wrong_token.shake(kToken ^ 1));
  RawClient no_handshake(at);  // a HELLO as the unauthenticated protocol sent it, token and all
  {
    std::vector<uint8_t> h(tcp::kFrameHeaderBytes + 24 + 8);
    tcp::write_frame_header(h.data(), tcp::kHello);
    store_le<uint32_t>(h.data() + 8, 2);
    store_le<uint64_t>(h.data() + 16, kToken);
    no_handshake.put(h);
  }
  RawClient out_of_range(at);
  out_of_range.hello();
  out_of_range.put(out_of_range.slice_frame({1, bytes, slice, 999, slice, 0}));  // index past the end
  RawClient wrong_length(at);
  wrong_length.hello();
  wrong_length.put(wrong_length.slice_frame({1, bytes, slice, 0, 4096, 0}));  // short middle slice
  RawClient other_layout(at);
  other_layout.hello();
  other_layout.put(other_layout.slice_frame({1, bytes, 1 << 20, 0, 1 << 20, 0}));  // another slice size
  RawClient unknown_transfer(at);
  unknown_transfer.hello();
  unknown_transfer.put(unknown_transfer.slice_frame({42, bytes, slice, 0, slice, 0}));
  RawClient huge(at);
  huge.hello();
  huge.put(huge.slice_frame({1, bytes, slice, 0, 0xffffffffu, 0}));
  // Leaf-tagged frames (kLeafTagged) whose claims would make the receiver read tags it cannot
  // hold, check leaves that do not start where slices do, or take a checksum from both sides;
  // and one laid out right with tags and a payload made up (it lands nowhere for good).
  const auto leaf_tagged = [](RawClient& c, const SliceRef& ref, uint8_t flags) {
    auto f = c.slice_frame(ref);
    f[5] = flags;
    return f;
  };
  RawClient leaf_huge(at);
  leaf_huge.hello();
  leaf_huge.put(leaf_tagged(leaf_huge, {1, bytes, slice, 0, 0xffffffffu, 0}, tcp::kLeafTagged));
  RawClient leaf_off_leaves(at);
  leaf_off_leaves.hello();
  leaf_off_leaves.put(leaf_tagged(leaf_off_leaves, {1, bytes, slice + 8, 0, slice + 8, 0}, tcp::kLeafTagged));
  RawClient leaf_and_trailer(at);
  leaf_and_trailer.hello();
  leaf_and_trailer.put(
      leaf_tagged(leaf_and_trailer, {1, bytes, slice, 0, slice, 0}, tcp::kLeafTagged | tcp::kChecksumTrailer));
  RawClient leaf_forged(at);
  leaf_forged.hello();
  {
    auto f = leaf_tagged(leaf_forged, {1, bytes, slice, 2, slice, 0}, tcp::kLeafTagged);
    std::vector<uint8_t> rest(tcp::leaf_tag_block_bytes(slice / kHashLeafBytes) + slice + trust::kTagBytes);
    for (auto& b : rest) b = static_cast<uint8_t>(rng());
    f.insert(f.end(), rest.begin(), rest.end());
    leaf_forged.try_put(f);
  }
  RawClient slow_loris(at);
  slow_loris.hello();
  auto partial = slow_loris.slice_frame({1, bytes, slice, 1, slice, 0});
  partial.resize(partial.size() + 100, 0x77);  // a valid header and a trickle of payload, then silence
  slow_loris.put(partial);
  RawClient silent(at);  // connects and never says hello

  // Meanwhile a real sender moves the real transfer.
  auto sender = make_sender(rx, kToken, slice);
  const auto data = pattern(bytes, 5);
  auto r = sender->send(1, data.data(), data.size());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE(rx.staging.wait(1, milliseconds(2000)).ok());
  EXPECT_TRUE(std::equal(data.begin(), data.end(), memory.begin() + 2048));
  for (size_t i = 0; i < 2048; ++i) {
    ASSERT_EQ(memory[i], 0xA5);
    ASSERT_EQ(memory[memory.size() - 1 - i], 0xA5);
  }
  for (RawClient* c : {&random_bytes, &bad_magic, &wrong_token, &no_handshake, &out_of_range, &wrong_length,
                       &other_layout, &unknown_transfer, &huge, &leaf_huge, &leaf_off_leaves, &leaf_and_trailer,
                       &leaf_forged, &slow_loris, &silent}) {
    EXPECT_TRUE(c->dropped(milliseconds(2000)));
  }
  const auto drops = rx.listener->recent_drops();
  std::string all;
  for (const auto& d : drops) all += d + "\n";
  // The slow-loris header claimed slice 1: the real sender's copy supersedes it (or its frame times out).
  EXPECT_TRUE(all.find("superseded") != std::string::npos || all.find("payload of slice 1") != std::string::npos) << all;
  for (const char* reason : {"bad frame magic", "wrong secret", "no authentication", "of a 32-slice", "should be",
                             "does not match", "unknown transfer", "claims", "handshake", "do not start on leaves",
                             "a checksum after its payload", "authentication tag"}) {
    EXPECT_NE(all.find(reason), std::string::npos) << "no drop logged for '" << reason << "' in:\n" << all;
  }
}

// A slice whose checksum follows its payload (how a sender that hashes while it sends writes it).
std::vector<uint8_t> trailer_frame(const SliceRef& s, const uint8_t* payload, uint64_t trailer) {
  std::vector<uint8_t> f(tcp::kFrameHeaderBytes + kSliceHeaderBytes);
  tcp::write_frame_header(f.data(), tcp::kSlice, tcp::kChecksumTrailer);
  encode_slice_header(s, f.data() + tcp::kFrameHeaderBytes);
  f.insert(f.end(), payload, payload + s.length);
  uint8_t t[8];
  store_le<uint64_t>(t, trailer);
  f.insert(f.end(), t, t + 8);
  return f;
}

TEST_P(TcpHelper, ChecksumsAfterThePayloadAreVerifiedLikeOthers) {
  Receiver rx(1, {}, trust::Protection::kAuthenticated, GetParam());
  const Endpoint at = rx.listener->endpoints()[0];
  const uint32_t slice = (600 << 10) + 8;  // three pieces (kHashedPieceBytes), the last short
  const auto data = pattern(2 * slice, 21);
  ASSERT_TRUE(rx.staging.expect(1, data.size(), slice).ok());
  const uint64_t sum0 = content_hash(data.data(), slice);
  const uint64_t sum1 = content_hash(data.data() + slice, slice);

  RawClient client(at);
  client.hello();
  constexpr size_t kHead = tcp::kFrameHeaderBytes + kSliceHeaderBytes;
  client.put_sealed(trailer_frame({1, data.size(), slice, 0, slice, 0}, data.data(), sum0 ^ 1), kHead);  // a wrong trailer
  EXPECT_EQ(client.read_ack(), 1);  // rejected, the connection kept
  EXPECT_EQ(rx.staging.progress(1).arrived, 0u);
  EXPECT_EQ(rx.staging.progress(1).rejected, 1u);
  client.put_sealed(trailer_frame({1, data.size(), slice, 0, slice, 0}, data.data(), sum0), kHead);
  EXPECT_EQ(client.read_ack(), 0);
  client.put_sealed(trailer_frame({1, data.size(), slice, 1, slice, 0}, data.data() + slice, sum1), kHead);
  EXPECT_EQ(client.read_ack(), 0);
  ASSERT_TRUE(rx.staging.wait(1, milliseconds(1000)).ok());
  const auto got = rx.staging.bytes(1);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), data.begin()));
  // The checksum recorded for each slice is the trailer's: the digest is the sender's.
  ThreadPool pool(1);
  EXPECT_EQ(*rx.staging.digest(1), transfer_digest(slice_checksums(data.data(), TransferShape{1, data.size(), slice}, pool),
                                                     data.size()));

  // A header checksum as well as a trailer, or a flag on a frame that has no trailer: dropped.
  RawClient both(at);
  both.hello();
  both.try_put(both.sealed(trailer_frame({1, data.size(), slice, 0, slice, sum0}, data.data(), sum0), kHead));
  EXPECT_TRUE(both.dropped(milliseconds(2000)));
  RawClient flagged(at);
  flagged.hello();
  std::vector<uint8_t> beat(tcp::kFrameHeaderBytes + 8, 0);
  tcp::write_frame_header(beat.data(), tcp::kHeartbeat, tcp::kChecksumTrailer);
  flagged.put_sealed(beat, beat.size());
  EXPECT_TRUE(flagged.dropped(milliseconds(2000)));
  std::string all;
  for (const auto& d : rx.listener->recent_drops()) all += d + "\n";
  EXPECT_NE(all.find("checksum in its header and after it"), std::string::npos) << all;
  EXPECT_NE(all.find("flags"), std::string::npos) << all;
}

// An on-path attacker holding no secret: it can rewrite a slice and the checksum beside it, but
// not the tag. Altered, replayed or reordered, the frame is refused, its connection dropped, and
// nothing of it counts; a proper sender's frames still land.
TEST_P(TcpHelper, SlicesAlteredReplayedOrReorderedInFlightAreRefused) {
  Receiver rx(1, {}, trust::Protection::kAuthenticated, GetParam());
  const Endpoint at = rx.listener->endpoints()[0];
  const uint32_t slice = (600 << 10) + 8;  // three pieces (kHashedPieceBytes), the last short
  const auto data = pattern(2 * slice, 23);
  ASSERT_TRUE(rx.staging.expect(1, data.size(), slice).ok());
  const uint64_t sum0 = content_hash(data.data(), slice);
  constexpr size_t kHead = tcp::kFrameHeaderBytes + kSliceHeaderBytes;
  const auto frame0 = trailer_frame({1, data.size(), slice, 0, slice, 0}, data.data(), sum0);

  RawClient altered(at);
  altered.hello();
  auto forged = altered.sealed(frame0, kHead);
  // The attacker's edit: a payload byte and the trailer's checksum to match it.
  std::vector<uint8_t> edited(data.begin(), data.begin() + slice);
  edited[100] ^= 0xff;
  forged[kHead + 100] ^= 0xff;
  store_le<uint64_t>(forged.data() + kHead + slice, content_hash(edited.data(), slice));
  altered.put(forged);
  EXPECT_EQ(altered.read_ack(), -1);
  EXPECT_TRUE(altered.dropped(milliseconds(2000)));

  RawClient replayed(at);
  replayed.hello();
  const auto once = replayed.sealed(frame0, kHead);
  replayed.put(once);
  EXPECT_EQ(replayed.read_ack(), 0);
  replayed.put(once);  // the same bytes again
  EXPECT_EQ(replayed.read_ack(), -1);

  RawClient reordered(at);
  reordered.hello();
  const auto first = reordered.sealed(frame0, kHead);
  const auto second = reordered.sealed(trailer_frame({1, data.size(), slice, 1, slice, 0}, data.data() + slice,
                                                     content_hash(data.data() + slice, slice)),
                                       kHead);
  reordered.put(second);
  EXPECT_EQ(reordered.read_ack(), -1);

  // Only the replayed client's first, genuine frame landed.
  EXPECT_EQ(rx.staging.progress(1).arrived, 1u);
  std::string all;
  for (const auto& d : rx.listener->recent_drops()) all += d + "\n";
  EXPECT_NE(all.find("authentication tag"), std::string::npos) << all;
  auto sender = make_sender(rx, kToken, slice);
  ASSERT_TRUE(sender->send(1, data.data(), data.size()).ok());
  ASSERT_TRUE(rx.staging.wait(1, milliseconds(2000)).ok());
  const auto got = rx.staging.bytes(1);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), data.begin()));
}

// Leaf-tagged slices: the frame's tag covers the header and the leaves' tags, and the payload is
// checked leaf by leaf. What an attacker on the wire can change is the payload: a byte flipped,
// or bytes from elsewhere (another slice, an earlier buffer) in its place. Each fails a leaf's tag
// (the leaf's place in the buffer is inside it, not only its place in the slice): the frame is
// refused, its connection dropped naming the leaf, and nothing of it counts. A sender given a
// wrong tag gets nowhere either.
TEST_P(TcpHelper, APayloadAlteredUnderItsLeafTagsIsRefused) {
  Receiver rx(1, {}, trust::Protection::kAuthenticated, GetParam());
  const Endpoint to = rx.listener->endpoints()[0];
  const uint32_t slice = 5 * kHashLeafBytes;       // two pieces (kHashedPieceBytes), the second one leaf
  const auto data = pattern(3 * slice - 100, 41);  // the last slice and its last leaf short
  const auto tags = leaf_tags_of(data);
  ASSERT_TRUE(rx.staging.expect(1, data.size(), slice).ok());
  // Slice `index` as its sender writes it: header, body, salt and tags (the frame's tag covers
  // them), the payload, then the frame's tag. `tags_of`: whose checksum and leaf tags the header
  // carries (slice `index`'s when -1); `payload`: the buffer whose bytes at that place go out.
  const auto frame = [&](RawClient& client, uint32_t index, size_t flip_at, int tags_of = -1,
                         const std::vector<uint8_t>* payload = nullptr) {
    const size_t at = size_t{tags_of < 0 ? index : static_cast<uint32_t>(tags_of)} * slice;
    const std::vector<uint8_t>& bytes = payload != nullptr ? *payload : data;
    const uint32_t length = static_cast<uint32_t>(std::min<size_t>(slice, data.size() - at));
    const SliceRef ref{1, data.size(), slice, index, length, content_hash(data.data() + at, length)};
    std::vector<uint8_t> f = client.slice_frame(ref);
    f[5] = tcp::kLeafTagged;
    f.insert(f.end(), tags->salt.begin(), tags->salt.end());
    for (uint64_t l = at / kHashLeafBytes; l < at / kHashLeafBytes + ref.leaf_count(); ++l) {
      f.insert(f.end(), tags->tags[l].begin(), tags->tags[l].end());
    }
    trust::FrameSeal& seal = *client.session.seals.outgoing;
    seal.begin(f.data(), f.size());
    uint8_t tag[trust::kTagBytes];
    seal.finish(tag);
    f.insert(f.end(), bytes.begin() + at, bytes.begin() + at + length);
    if (flip_at != SIZE_MAX) f[f.size() - length + flip_at] ^= 0x10;  // on the wire, after sealing
    f.insert(f.end(), tag, tag + trust::kTagBytes);
    return f;
  };
  const auto drops = [&] {
    std::string all;
    for (const auto& d : rx.listener->recent_drops()) all += d + "\n";
    return all;
  };
  RawClient altered(to);
  altered.hello();
  altered.try_put(frame(altered, 0, 3 * kHashLeafBytes + 7));  // in the slice's fourth leaf
  EXPECT_EQ(altered.read_ack(), -1);
  EXPECT_TRUE(altered.dropped(milliseconds(2000)));
  EXPECT_NE(drops().find("leaf 3 failed its tag"), std::string::npos) << drops();

  // Slice 1's header carrying slice 0's checksum, tags and payload (the receiver checks leaves 5
  // on), and slice 1's header and tags with an earlier buffer's bytes at that place.
  const auto earlier = pattern(data.size(), 43);
  const std::vector<std::pair<int, const std::vector<uint8_t>*>> moves = {{0, nullptr}, {-1, &earlier}};
  for (const auto& [tags_of, payload] : moves) {
    RawClient moved(to);
    moved.hello();
    moved.try_put(frame(moved, 1, SIZE_MAX, tags_of, payload));
    EXPECT_EQ(moved.read_ack(), -1);
    EXPECT_TRUE(moved.dropped(milliseconds(2000)));
  }
  EXPECT_EQ(rx.staging.progress(1).arrived, 0u);
  const std::string all = drops();
  size_t refused_at_5 = 0;
  for (size_t p = all.find("leaf 5 failed its tag"); p != std::string::npos;
       p = all.find("leaf 5 failed its tag", p + 1)) {
    ++refused_at_5;
  }
  EXPECT_EQ(refused_at_5, 2u) << all;

  RawClient genuine(to);
  genuine.hello();
  genuine.put(frame(genuine, 1, SIZE_MAX));
  EXPECT_EQ(genuine.read_ack(), 0);
  EXPECT_EQ(rx.staging.progress(1).arrived, 1u);

  // A sender whose tags are not the bytes' (the first leaf's tag off by a bit) never lands slice 0.
  // Slice 2, whose tags are right, may land or not: it shares the connection each refusal drops,
  // and whether a retry sends it ahead of slice 0 is the sprayer's timing.
  auto wrong = std::make_shared<trust::LeafTags>(*tags);
  wrong->tags[0][5] ^= 1;
  auto sender = make_sender(rx, kToken, slice);
  ThreadPool pool(1);
  const auto leaves = content_hash_leaves(data.data(), data.size(), pool);
  EXPECT_FALSE(sender->send(1, data.data(), data.size(), leaves, wrong).ok());
  const auto present = rx.staging.present(1);
  EXPECT_EQ(present[0], 0) << "slice 0 landed under a wrong leaf tag";
  EXPECT_EQ(present[1], 1);
  EXPECT_NE(drops().find("leaf 0 failed its tag"), std::string::npos) << drops();
  // With the right tags the transfer completes, exact.
  sender = make_sender(rx, kToken, slice);
  auto r = sender->send(1, data.data(), data.size(), leaves, tags);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE(rx.staging.wait(1, milliseconds(2000)).ok());
  const auto got = rx.staging.bytes(1);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), data.begin()));
}

// A relay forwards each slice with the leaf tags it arrived with (as with its checksum): the next
// receiver checks the producer's tags, and no hop tags the payload again. Tags altered on the way
// (a relay's memory, say) are refused there as on the first hop.
TEST_P(TcpHelper, ARelayForwardsTheLeafTagsItReceived) {
  Receiver middle(1, {}, trust::Protection::kAuthenticated, GetParam());
  Receiver last(1, {}, trust::Protection::kAuthenticated, GetParam());
  const uint32_t slice = 4 * kHashLeafBytes;
  const auto data = pattern(5 * slice - 1000, 47);
  const auto tags = leaf_tags_of(data);
  std::mutex mu;
  std::map<uint32_t, SliceRef> arrived;
  middle.staging.set_on_slice([&](const SliceRef& s) {
    std::lock_guard<std::mutex> lock(mu);
    arrived[s.index] = s;
  });
  ASSERT_TRUE(middle.staging.expect(1, data.size(), slice).ok());
  ThreadPool pool(1);
  const auto leaves = content_hash_leaves(data.data(), data.size(), pool);
  ASSERT_TRUE(make_sender(middle, kToken, slice)->send(1, data.data(), data.size(), leaves, tags).ok());
  ASSERT_TRUE(middle.staging.wait(1, milliseconds(2000)).ok());
  ASSERT_EQ(arrived.size(), 5u);
  for (const auto& [index, ref] : arrived) {  // the producer's tags, each slice's own
    ASSERT_TRUE(ref.leaf_tags != nullptr) << index;
    EXPECT_TRUE(ref.leaf_tags_fit()) << index;
    EXPECT_EQ(ref.leaf_tags->salt, tags->salt);
    EXPECT_EQ(ref.leaf_tags->first_leaf, ref.first_leaf());
    for (uint64_t l = ref.first_leaf(); l < ref.first_leaf() + ref.leaf_count(); ++l) {
      EXPECT_EQ(ref.leaf_tags->of(l), tags->tags[l]) << "leaf " << l;
    }
  }
  const auto forward = [&](uint64_t transfer, const std::map<uint32_t, SliceRef>& refs) {
    EXPECT_TRUE(last.staging.expect(transfer, data.size(), slice).ok());
    auto relay = make_sender(last, kToken, slice);
    const auto held = middle.staging.bytes(1);
    EXPECT_TRUE(relay->open(transfer, held.data(), held.size(), slice).ok());
    for (const auto& [index, ref] : refs) relay->offer(index, ref.checksum, ref.leaf_tags);
    return relay->wait();
  };
  ASSERT_TRUE(forward(2, arrived).ok());
  ASSERT_TRUE(last.staging.wait(2, milliseconds(2000)).ok());
  const auto got = last.staging.bytes(2);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), data.begin()));
  for (const auto& drop : last.listener->recent_drops()) ADD_FAILURE() << drop;

  auto altered = arrived;
  auto bent = std::make_shared<trust::LeafTags>(*altered[3].leaf_tags);
  bent->tags[1][0] ^= 1;  // slice 3's second leaf: leaf 13
  altered[3].leaf_tags = bent;
  EXPECT_FALSE(forward(3, altered).ok());
  // Slices 0-2 go ahead of slice 3 on the first connection; slice 4 shares the connections its
  // refusals drop, so whether it lands is the sprayer's timing.
  const auto present = last.staging.present(3);
  EXPECT_EQ(std::vector<uint8_t>(present.begin(), present.begin() + 4), (std::vector<uint8_t>{1, 1, 1, 0}));
  std::string all;
  for (const auto& d : last.listener->recent_drops()) all += d + "\n";
  EXPECT_NE(all.find("leaf 13 failed its tag"), std::string::npos) << all;
}

INSTANTIATE_TEST_SUITE_P(Ends, TcpHelper, ::testing::Values(PieceHelperMode::kOff, PieceHelperMode::kOn), helper_name);

TEST(TcpLoopback, RefusedConnectionsAreAClearError) {
  // A rail to an address nobody listens on: the transfer fails within the stall timeout, naming the rail.
  tcp::TcpTransport transport;
  std::vector<std::unique_ptr<Channel>> channels;
  channels.push_back(transport.connect({Endpoint{"127.0.0.1", 0}, Endpoint{"127.0.0.99", 1}, "dead"}, {}).value());
  SprayOptions spray;
  spray.stall_timeout = milliseconds(400);
  Sprayer sender(std::move(channels), spray);
  std::vector<uint8_t> data(1 << 20);
  auto r = sender.send(1, data.data(), data.size());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("dead"), std::string::npos) << r.status().message();
}

// A rail dialling a receiver that is not there is not silent while its first connects are under
// way (across a WAN the handshake takes a while), for up to the dial grace (2 s); once two
// connects in a row failed it is silent since it was made, so a relay reports a child it cannot
// reach without waiting out the grace. A rail whose receiver answers is heard from the start.
TEST(TcpLoopback, ARailWhoseConnectsFailIsSilentBeforeTheDialGraceEnds) {
  tcp::TcpTransport transport;
  const auto made = std::chrono::steady_clock::now();
  auto dead = transport.connect({Endpoint{"127.0.0.1", 0}, Endpoint{"127.0.0.99", 1}, "dead"}, {}).value();
  std::optional<Millis> silent;
  while (std::chrono::steady_clock::now() - made < milliseconds(1500)) {
    silent = dead->receiver_silent_for();
    if (silent && *silent > Millis(0)) break;
    std::this_thread::sleep_for(milliseconds(5));
  }
  ASSERT_TRUE(silent.has_value());
  EXPECT_GT(*silent, Millis(0)) << "still counted as dialling 1.5 s after it was made";
  Receiver rx(1);
  ChannelOptions options;
  options.trust = testing::test_trust(kToken, trust::Protection::kAuthenticated);
  auto live = transport.connect({Endpoint{"127.0.0.1", 0}, rx.listener->endpoints()[0], "live"}, options).value();
  ASSERT_TRUE(wait_ready(*live, milliseconds(2000)));
  for (int i = 0; i < 10; ++i) {
    EXPECT_LT(live->receiver_silent_for().value(), Millis(400)) << "its heartbeats come every 50 ms";
    std::this_thread::sleep_for(milliseconds(30));
  }
}

// deltacast-bench wire's plain-stream baseline and the slices take turns on a connection. A
// baseline started while a late copy of a slice was still going out used the connection's seal
// inside the slice's frame: the cipher refused, and the exception aborted the process. Here each
// stream starts right after a 32 MiB slice is queued (and heartbeats are due every millisecond):
// both must go through whole, in every mode that seals.
TEST(TcpLoopback, ABaselineStreamAndASliceTakeTurnsOnTheConnection) {
  for (const auto mode : {trust::Protection::kAuthenticated, trust::Protection::kEncrypted})
  for (const auto helper : {PieceHelperMode::kOff, PieceHelperMode::kOn}) {
    SCOPED_TRACE(std::string(trust::protection_name(mode)) + (helper == PieceHelperMode::kOn ? " helped" : " inline"));
    Receiver rx(1, {}, mode, helper);
    tcp::TcpTransport transport;
    ChannelOptions options;
    options.trust = testing::test_trust(kToken, mode);
    options.heartbeat = milliseconds(1);
    options.piece_helper = helper;
    auto channel = transport.connect({Endpoint{"127.0.0.1", 0}, rx.listener->endpoints()[0], "rail0"}, options).value();
    auto* stream = dynamic_cast<tcp::TcpChannel*>(channel.get());
    ASSERT_NE(stream, nullptr);
    for (int i = 0; i < 100 && !channel->ready(); ++i) std::this_thread::sleep_for(milliseconds(10));
    ASSERT_TRUE(channel->ready());
    const auto data = pattern(32 << 20, 77);
    for (uint64_t transfer = 1; transfer <= 3; ++transfer) {
      ASSERT_TRUE(rx.staging.expect(transfer, data.size(), static_cast<uint32_t>(data.size())).ok());
      SliceRef slice;
      slice.transfer = transfer;
      slice.transfer_bytes = data.size();
      slice.slice_bytes = static_cast<uint32_t>(data.size());
      slice.length = static_cast<uint32_t>(data.size());
      slice.has_checksum = false;  // hashed as it goes out: the longest the writer holds the seal
      std::promise<Status> acked;
      channel->send(slice, data.data(), [&acked](const Status& s) { acked.set_value(s); });
      auto streamed = stream->stream_for(milliseconds(30));
      ASSERT_TRUE(streamed.ok()) << streamed.status().to_string();
      EXPECT_GT(*streamed, 0u);
      const Status sent = acked.get_future().get();
      ASSERT_TRUE(sent.ok()) << sent.to_string();
      ASSERT_TRUE(rx.staging.wait(transfer, milliseconds(2000)).ok());
      const auto got = rx.staging.bytes(transfer);
      EXPECT_TRUE(std::equal(got.begin(), got.end(), data.begin()));
    }
    EXPECT_TRUE(rx.listener->recent_drops().empty()) << rx.listener->recent_drops().front();
    // One stream at a time: a second is refused, not run over the first one's frames.
    std::thread first([&] { EXPECT_TRUE(stream->stream_for(milliseconds(300)).ok()); });
    std::this_thread::sleep_for(milliseconds(100));
    EXPECT_EQ(stream->stream_for(milliseconds(10)).status().code(), StatusCode::kFailedPrecondition);
    first.join();
    // The channel closed (and destroyed) under a running stream: the stream ends with an error,
    // and the writer waits for it before it closes the socket and the channel goes away.
    std::thread last([&] { EXPECT_FALSE(stream->stream_for(milliseconds(2000)).ok()); });
    std::this_thread::sleep_for(milliseconds(100));
    channel.reset();
    last.join();
  }
}

}  // namespace
}  // namespace deltacast
