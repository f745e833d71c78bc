#include "core/trust/handshake.h"

#include <gtest/gtest.h>

#include <cstring>

namespace deltacast::trust {
namespace {

GroupSecret secret_of(uint64_t n) { return GroupSecret::from_legacy_token(n); }

TEST(Protection, InsecureOnlyWhereBothChooseItAndTheStrongerOtherwise) {
  using P = Protection;
  EXPECT_EQ(*agree_protection(P::kInsecure, P::kInsecure), P::kInsecure);
  EXPECT_EQ(*agree_protection(P::kAuthenticated, P::kAuthenticated), P::kAuthenticated);
  EXPECT_EQ(*agree_protection(P::kAuthenticated, P::kEncrypted), P::kEncrypted);
  EXPECT_EQ(*agree_protection(P::kEncrypted, P::kAuthenticated), P::kEncrypted);
  auto down = agree_protection(P::kAuthenticated, P::kInsecure);
  ASSERT_FALSE(down.ok());
  EXPECT_EQ(down.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(down.status().message().find("the peer offers insecure; this side requires authenticated"),
            std::string::npos);
  auto up = agree_protection(P::kInsecure, P::kEncrypted);
  ASSERT_FALSE(up.ok());
  EXPECT_NE(up.status().message().find("offers encrypted; this side requires insecure"), std::string::npos);
  EXPECT_EQ(*parse_protection("encrypted"), P::kEncrypted);
  EXPECT_FALSE(parse_protection("secure").ok());
}

TEST(Handshake, HellosRoundTripAndForeignBytesAreRefusedNamingWhy) {
  const Hello hello = fresh_hello(Protection::kEncrypted, Purpose::kData).value();
  uint8_t bytes[kHelloBytes];
  encode_hello(hello, bytes);
  auto back = decode_hello(bytes, sizeof bytes);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->mode, Protection::kEncrypted);
  EXPECT_EQ(back->purpose, Purpose::kData);
  EXPECT_EQ(back->nonce, hello.nonce);
  EXPECT_NE(fresh_hello(Protection::kEncrypted, Purpose::kData).value().nonce, hello.nonce);

  uint8_t old_peer[kHelloBytes] = {0x44, 0x43, 0x57, 0x31};  // a data HELLO of the unauthenticated protocol
  auto refused = decode_hello(old_peer, sizeof old_peer);
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(refused.status().message().find("no authentication"), std::string::npos);
  for (auto [at, value, words] :
       {std::tuple{4, 9, "version 9"}, std::tuple{5, 3, "unknown mode"}, std::tuple{6, 0, "unknown purpose"},
        std::tuple{7, 1, "key-update mark of 2^1"}, std::tuple{7, 63, "2^63"}}) {
    uint8_t damaged[kHelloBytes];
    std::memcpy(damaged, bytes, kHelloBytes);
    damaged[at] = static_cast<uint8_t>(value);
    auto status = decode_hello(damaged, kHelloBytes).status();
    EXPECT_NE(status.message().find(words), std::string::npos) << status.message();
  }
  EXPECT_FALSE(decode_hello(bytes, kHelloBytes - 1).ok());
}

TEST(Handshake, ProofsHoldOnlyForTheSecretTheRoleAndTheseHellos) {
  const GroupSecret secret = secret_of(42);
  const Hello client = fresh_hello(Protection::kAuthenticated, Purpose::kControl).value();
  const Hello server = fresh_hello(Protection::kAuthenticated, Purpose::kControl).value();
  const Proof from_server = prove(secret, Role::kServer, client, server);
  const Proof from_client = prove(secret, Role::kClient, client, server);
  EXPECT_TRUE(proof_is_right(secret, Role::kServer, client, server, from_server.data()));
  EXPECT_TRUE(proof_is_right(secret, Role::kClient, client, server, from_client.data()));
  // A proof is not the other role's (a reflected proof fails).
  EXPECT_FALSE(proof_is_right(secret, Role::kClient, client, server, from_server.data()));
  // Another secret's proof fails.
  EXPECT_FALSE(proof_is_right(secret_of(43), Role::kServer, client, server, from_server.data()));
  // A recorded proof fails against a fresh nonce (replay).
  const Hello later = fresh_hello(Protection::kAuthenticated, Purpose::kControl).value();
  EXPECT_FALSE(proof_is_right(secret, Role::kClient, client, later, from_client.data()));
  // A hello whose mode was rewritten in flight (a downgrade) fails the proofs.
  Hello downgraded = client;
  downgraded.mode = Protection::kInsecure;
  EXPECT_FALSE(proof_is_right(secret, Role::kClient, downgraded, server, from_client.data()));
  // The proof does not contain the secret.
  EXPECT_EQ(std::search(from_client.begin(), from_client.end(), secret.bytes().begin(), secret.bytes().begin() + 8),
            from_client.end());
}

TEST(Handshake, TermsNameAPurposeMixUpFromEitherEndAndTheModes) {
  const Hello control = fresh_hello(Protection::kAuthenticated, Purpose::kControl).value();
  const Hello data = fresh_hello(Protection::kAuthenticated, Purpose::kData).value();
  // A control link that reached a data rail: each end names it from where it stands.
  auto as_client = agree_terms(Role::kClient, Protection::kAuthenticated, control, data);
  ASSERT_FALSE(as_client.ok());
  EXPECT_EQ(as_client.status().message(),
            "handshake: the peer is a consumer's data rail, not a producer's control port");
  auto as_server = agree_terms(Role::kServer, Protection::kAuthenticated, control, data);
  ASSERT_FALSE(as_server.ok());
  EXPECT_EQ(as_server.status().message(),
            "handshake: the peer asked for a producer's control port; this is a consumer's data rail");
  // Same purpose: the stronger authenticated mode, from the peer's hello (the other end's).
  Hello encrypting = data;
  encrypting.mode = Protection::kEncrypted;
  EXPECT_EQ(agree_terms(Role::kClient, Protection::kAuthenticated, data, encrypting).value(), Protection::kEncrypted);
  EXPECT_EQ(agree_terms(Role::kServer, Protection::kAuthenticated, encrypting, data).value(), Protection::kEncrypted);
  // Less than this side requires is refused naming both modes.
  Hello insecure = data;
  insecure.mode = Protection::kInsecure;
  auto refused = agree_terms(Role::kServer, Protection::kAuthenticated, insecure, data);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("insecure"), std::string::npos) << refused.status().message();
  EXPECT_NE(refused.status().message().find("authenticated"), std::string::npos) << refused.status().message();
}

TEST(Handshake, CheckProofPassesTheRightProofAndNamesAWrongSecret) {
  const GroupSecret secret = secret_of(42);
  const Hello client = fresh_hello(Protection::kAuthenticated, Purpose::kData).value();
  const Hello server = fresh_hello(Protection::kAuthenticated, Purpose::kData).value();
  const Proof right = prove(secret, Role::kServer, client, server);
  EXPECT_TRUE(check_proof(secret, Role::kServer, client, server, right.data()).ok());
  const Status wrong = check_proof(secret_of(43), Role::kServer, client, server, right.data());
  EXPECT_EQ(wrong.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(wrong.message().find("wrong secret"), std::string::npos) << wrong.message();
}

TEST(Handshake, BothEndsDeriveTheSameKeysAndEveryInputChangesThem) {
  const GroupSecret secret = secret_of(7);
  const Hello client = fresh_hello(Protection::kEncrypted, Purpose::kData).value();
  const Hello server = fresh_hello(Protection::kEncrypted, Purpose::kData).value();
  const SessionKeys a = derive_keys(secret, client, server, Protection::kEncrypted).value();
  const SessionKeys b = derive_keys(secret, client, server, Protection::kEncrypted).value();
  EXPECT_EQ(a.client_to_server, b.client_to_server);
  EXPECT_EQ(a.server_to_client, b.server_to_client);
  EXPECT_NE(a.client_to_server, a.server_to_client);
  EXPECT_NE(derive_keys(secret_of(8), client, server, Protection::kEncrypted).value().client_to_server, a.client_to_server);
  EXPECT_NE(derive_keys(secret, client, fresh_hello(Protection::kEncrypted, Purpose::kData).value(), Protection::kEncrypted).value()
                .client_to_server,
            a.client_to_server);
  EXPECT_NE(derive_keys(secret, client, server, Protection::kAuthenticated).value().client_to_server, a.client_to_server);
  Hello control = client;
  control.purpose = Purpose::kControl;
  EXPECT_NE(derive_keys(secret, control, server, Protection::kEncrypted).value().client_to_server, a.client_to_server);
}

}  // namespace
}  // namespace deltacast::trust
