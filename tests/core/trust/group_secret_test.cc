#include "core/trust/group_secret.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace deltacast::trust {
namespace {

constexpr char kHex[] = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

std::string temp_file(const std::string& name, const std::string& content) {
  const auto path = std::filesystem::temp_directory_path() / (name + std::to_string(::getpid()));
  std::ofstream(path, std::ios::binary) << content;
  return path.string();
}

TEST(GroupSecret, HexBytesAndFilesGiveTheSameSecret) {
  auto hex = GroupSecret::from_hex(kHex);
  ASSERT_TRUE(hex.ok()) << hex.status().message();
  for (size_t i = 0; i < GroupSecret::kBytes; ++i) EXPECT_EQ(hex->bytes()[i], i);
  std::string raw(32, '\0');
  for (int i = 0; i < 32; ++i) raw[i] = static_cast<char>(i);
  auto bytes = GroupSecret::from_bytes(raw.data(), raw.size());
  auto raw_file = GroupSecret::from_file(temp_file("raw", raw));
  auto hex_file = GroupSecret::from_file(temp_file("hex", std::string(kHex) + "\n"));
  ASSERT_TRUE(bytes.ok() && raw_file.ok() && hex_file.ok());
  EXPECT_EQ(*bytes, *hex);
  EXPECT_EQ(*raw_file, *hex);
  EXPECT_EQ(*hex_file, *hex);
  auto parsed = GroupSecret::parse(std::string("hex:") + kHex);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, *hex);
}

TEST(GroupSecret, BadInputIsRefusedSayingWhy) {
  EXPECT_NE(GroupSecret::from_bytes("short", 5).status().message().find("5 bytes given"), std::string::npos);
  EXPECT_NE(GroupSecret::from_hex("abc").status().message().find("3 hex digits"), std::string::npos);
  std::string bad(kHex);
  bad[10] = 'g';
  EXPECT_NE(GroupSecret::from_hex(bad).status().message().find("'g' is not a hex digit"), std::string::npos);
  EXPECT_EQ(GroupSecret::from_file("/nonexistent/secret").status().code(), StatusCode::kNotFound);
  EXPECT_NE(GroupSecret::from_file(temp_file("odd", "seventeen bytes!!")).status().message().find("17 bytes"),
            std::string::npos);
  EXPECT_FALSE(GroupSecret::from_passphrase("").ok());
  EXPECT_NE(GroupSecret::parse("nonsense").status().message().find("hex:<64 hex digits>"), std::string::npos);
  EXPECT_NE(GroupSecret::parse("99999999999999999999999").status().message().find("64-bit"), std::string::npos);
  ::unsetenv("DELTACAST_TEST_NO_SUCH_SECRET");
  EXPECT_NE(GroupSecret::parse("env:DELTACAST_TEST_NO_SUCH_SECRET").status().message().find("not set"),
            std::string::npos);
  ::setenv("DELTACAST_TEST_LOOP_SECRET", "env:DELTACAST_TEST_LOOP_SECRET", 1);
  EXPECT_FALSE(GroupSecret::parse("env:DELTACAST_TEST_LOOP_SECRET").ok());
}

TEST(GroupSecret, PassphrasesAreStretchedTheSameEverywhereAndApart) {
  auto a = GroupSecret::from_passphrase("correct horse battery staple");
  auto b = GroupSecret::parse("pass:correct horse battery staple");
  auto c = GroupSecret::from_passphrase("correct horse battery stapler");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *c);
  ::setenv("DELTACAST_TEST_SECRET", "pass:correct horse battery staple", 1);
  auto from_env = GroupSecret::parse("env:DELTACAST_TEST_SECRET");
  ASSERT_TRUE(from_env.ok());
  EXPECT_EQ(*from_env, *a);
}

TEST(GroupSecret, LegacyTokensMapToDistinctSecretsAndNoSecretIsTokenZero) {
  EXPECT_NE(GroupSecret::from_legacy_token(1), GroupSecret::from_legacy_token(2));
  EXPECT_EQ(GroupSecret(), GroupSecret::from_legacy_token(0));
  auto decimal = GroupSecret::parse("57005"), hex = GroupSecret::parse("0xdead");
  ASSERT_TRUE(decimal.ok() && hex.ok());
  EXPECT_EQ(*decimal, GroupSecret::from_legacy_token(0xdead));
  EXPECT_EQ(*hex, GroupSecret::from_legacy_token(0xdead));
  EXPECT_EQ(*GroupSecret::parse("legacy:57005"), GroupSecret::from_legacy_token(0xdead));
}

TEST(GroupSecret, TheFingerprintNamesTheSecretWithoutShowingIt) {
  auto secret = GroupSecret::from_hex(kHex);
  ASSERT_TRUE(secret.ok());
  const std::string print = secret->fingerprint();
  EXPECT_EQ(print.size(), 8u);
  EXPECT_EQ(std::string(kHex).find(print), std::string::npos);
  EXPECT_EQ(print, GroupSecret::from_hex(kHex)->fingerprint());
  EXPECT_NE(print, GroupSecret::from_legacy_token(7).fingerprint());
}

}  // namespace
}  // namespace deltacast::trust
