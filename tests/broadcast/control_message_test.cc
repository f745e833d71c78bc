// Control-plane framing and fields from untrusted peers: round trips, and
// every malformed frame refused with an error rather than a crash.
#include "broadcast/control_message.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "core/byte_io.h"

namespace deltacast {
namespace {

class SocketPair : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds_), 0); }
  void TearDown() override {
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  Result<Json> read(std::chrono::milliseconds wait = std::chrono::milliseconds(200)) {
    return read_message(fds_[1], ControlClock::now() + wait, std::chrono::milliseconds(200));
  }
  void write_raw(const void* data, size_t n) { ASSERT_EQ(::write(fds_[0], data, n), static_cast<ssize_t>(n)); }
  void write_frame(uint32_t magic, const std::string& text, uint32_t claimed) {
    uint8_t header[8];
    store_le<uint32_t>(header, magic);
    store_le<uint32_t>(header + 4, claimed);
    write_raw(header, 8);
    write_raw(text.data(), text.size());
  }
  int fds_[2];
};

TEST_F(SocketPair, MessagesRoundTrip) {
  const Json m = {{"type", msg::kVersion}, {"version", 7}, {"chains", {{1, 2}, {2, 1}}}};
  ASSERT_TRUE(write_message(fds_[0], m, ControlClock::now() + std::chrono::seconds(1)).ok());
  auto got = read();
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, m);
}

TEST_F(SocketPair, BadFramesAreRefused) {
  write_frame(0x12345678, "{}", 2);
  EXPECT_EQ(read().status().code(), StatusCode::kCorrupt);
}

TEST_F(SocketPair, OversizedLengthIsRefusedBeforeAllocating) {
  write_frame(kControlMagic, "", kMaxControlMessageBytes + 1);
  auto got = read();
  EXPECT_EQ(got.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(got.status().message().find("exceeds"), std::string::npos);
}

TEST_F(SocketPair, NonObjectsAndUntypedMessagesAreRefused) {
  for (const std::string text : {"[1,2]", "not json", "{\"type\": 5}", "{\"version\": 1}"}) {
    write_frame(kControlMagic, text, static_cast<uint32_t>(text.size()));
    EXPECT_EQ(read().status().code(), StatusCode::kCorrupt) << text;
  }
}

TEST_F(SocketPair, ATruncatedFrameTimesOutInsteadOfHanging) {
  write_frame(kControlMagic, "{\"ty", 40);
  auto got = read();
  EXPECT_FALSE(got.ok());
}

TEST(ControlFields, WrongTypesAndMissingFieldsNameTheField) {
  const Json m = {{"type", "x"}, {"version", "seven"}};
  auto missing = field<uint64_t>(m, "bytes");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("bytes"), std::string::npos);
  auto wrong = field<uint64_t>(m, "version");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("version"), std::string::npos);
}

TEST(ControlManifest, RoundTripsAndRejectsForgeries) {
  auto manifest = Manifest::create({{"a.weight", DType::kBF16, {4, 8}}, {"b", DType::kF32, {3}}});
  ASSERT_TRUE(manifest.ok());
  auto back = manifest_from_json(manifest_to_json(*manifest));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->hash(), manifest->hash());
  for (const Json& forged : {Json::object(), Json::array({1}), Json::array({{{"name", "a"}, {"dtype", "nope"}, {"shape", {1}}}}),
                             Json::array({{{"name", "a"}, {"dtype", "bf16"}, {"shape", "x"}}})}) {
    EXPECT_EQ(manifest_from_json(forged).status().code(), StatusCode::kCorrupt) << forged.dump();
  }
}

TEST(ControlBitmap, RoundTripsEverySizeAndRejectsBadText) {
  for (size_t bits : {0u, 1u, 7u, 8u, 9u, 63u, 1000u}) {
    std::vector<uint8_t> present(bits);
    for (size_t i = 0; i < bits; ++i) present[i] = (i * 7 + 3) % 5 == 0;
    const std::string hex = encode_bitmap(present);
    auto back = decode_bitmap(hex, bits);
    ASSERT_TRUE(back.ok());
    for (size_t i = 0; i < bits; ++i) EXPECT_EQ((*back)[i], present[i] != 0) << bits << " " << i;
  }
  EXPECT_FALSE(decode_bitmap("0", 8).ok());
  EXPECT_FALSE(decode_bitmap("zz", 8).ok());
  EXPECT_FALSE(decode_bitmap("ff", 100).ok());
}

}  // namespace
}  // namespace deltacast
