// The ephemeral X25519 exchange of TCP handshakes (key_share.h) and what it adds to the proofs
// and keys (handshake.h). The whole exchange over real sockets, and a recording that the group
// secret does not open, are in tests/broadcast/transport/handshake_test.cc.
#include "core/trust/key_share.h"

#include <gtest/gtest.h>

#include "core/trust/handshake.h"

namespace deltacast::trust {
namespace {

TEST(KeyShare, TwoFreshPairsAgreeOnOneSecretNoThirdShares) {
  const KeyShare a = KeyShare::fresh().value(), b = KeyShare::fresh().value(), c = KeyShare::fresh().value();
  EXPECT_NE(a.share(), b.share());
  const SharedSecret ab = a.agree(b.share()).value();
  EXPECT_EQ(ab, b.agree(a.share()).value());
  EXPECT_NE(ab, a.agree(c.share()).value());
  EXPECT_NE(ab, c.agree(b.share()).value());
  EXPECT_NE(ab, SharedSecret{});
}

// Points of small order force a known secret (all zeros) whatever the private half: refused.
TEST(KeyShare, SharesOfSmallOrderAreRefusedNamingWhy) {
  const KeyShare mine = KeyShare::fresh().value();
  Share zero{}, one{};
  one[0] = 1;
  for (const Share& bad : {zero, one}) {
    auto agreed = mine.agree(bad);
    ASSERT_FALSE(agreed.ok());
    EXPECT_EQ(agreed.status().code(), StatusCode::kPermissionDenied);
    EXPECT_NE(agreed.status().message().find("key share"), std::string::npos) << agreed.status().message();
  }
}

Exchange exchange_between(const KeyShare& client, const KeyShare& server) {
  Exchange e;
  e.client = client.share();
  e.server = server.share();
  e.agreed = client.agree(server.share()).value();
  return e;
}

TEST(KeyShare, ProofsCoverBothSharesAndKeysNeedTheAgreedSecret) {
  const GroupSecret secret = GroupSecret::from_legacy_token(42);
  const Hello client = fresh_hello(Protection::kEncrypted, Purpose::kData).value();
  const Hello server = fresh_hello(Protection::kEncrypted, Purpose::kData).value();
  const KeyShare c = KeyShare::fresh().value(), s = KeyShare::fresh().value(), other = KeyShare::fresh().value();
  const Exchange exchange = exchange_between(c, s);
  const Proof proof = prove(secret, Role::kServer, client, server, &exchange);
  EXPECT_TRUE(check_proof(secret, Role::kServer, client, server, proof.data(), &exchange).ok());
  // Not without the shares, nor with either one replaced on the way.
  EXPECT_FALSE(proof_is_right(secret, Role::kServer, client, server, proof.data()));
  Exchange swapped = exchange;
  swapped.client = other.share();
  EXPECT_FALSE(proof_is_right(secret, Role::kServer, client, server, proof.data(), &swapped));
  swapped = exchange;
  swapped.server = other.share();
  EXPECT_FALSE(proof_is_right(secret, Role::kServer, client, server, proof.data(), &swapped));
  // The keys: both ends alike, and neither the group secret alone nor another exchange gives them.
  const SessionKeys keys = derive_keys(secret, client, server, Protection::kEncrypted, &exchange).value();
  Exchange server_side;
  server_side.client = c.share();
  server_side.server = s.share();
  server_side.agreed = s.agree(c.share()).value();
  EXPECT_EQ(derive_keys(secret, client, server, Protection::kEncrypted, &server_side).value().client_to_server,
            keys.client_to_server);
  EXPECT_NE(derive_keys(secret, client, server, Protection::kEncrypted).value().client_to_server,
            keys.client_to_server);
  const Exchange another = exchange_between(c, other);
  EXPECT_NE(derive_keys(secret, client, server, Protection::kEncrypted, &another).value().server_to_client,
            keys.server_to_client);
}

}  // namespace
}  // namespace deltacast::trust
