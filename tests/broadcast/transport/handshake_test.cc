// The TCP handshake (broadcast/transport/handshake.h) over real sockets, with a tap between the
// two ends that records every byte, as someone on the path would: the session's keys are not in
// that recording together with the group secret (forward secrecy: the ephemeral X25519 halves
// never cross the wire), and a hello of another version is refused naming both versions.
#include "broadcast/transport/handshake.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <mutex>
#include <thread>
#include <vector>

namespace deltacast {
namespace {

using namespace std::chrono_literals;

// Copies one socket's bytes to another until the first hangs up, keeping a copy.
void relay(int from, int to, std::vector<uint8_t>* recording) {
  uint8_t buffer[4096];
  for (;;) {
    const ssize_t n = ::read(from, buffer, sizeof buffer);
    if (n <= 0) break;
    recording->insert(recording->end(), buffer, buffer + n);
    if (::write(to, buffer, static_cast<size_t>(n)) != n) break;
  }
  shutdown(to, SHUT_WR);
}

struct Tapped {
  Result<net::Session> client = internal_error("not run");
  Result<net::Session> server = internal_error("not run");
  std::vector<uint8_t> client_to_server, server_to_client;
};

// A client and a server shaking hands through the tap.
Tapped shake_through_tap(const trust::Trust& client_trust, const trust::Trust& server_trust) {
  int client_side[2], server_side[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, client_side), 0);
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, server_side), 0);
  Tapped tapped;
  std::thread up(relay, client_side[1], server_side[0], &tapped.client_to_server);
  std::thread down(relay, server_side[0], client_side[1], &tapped.server_to_client);
  const auto deadline = net::Clock::now() + 5s;
  std::thread server([&] {
    tapped.server =
        net::shake_hands(server_side[1], trust::Role::kServer, server_trust, trust::Purpose::kData, deadline);
    shutdown(server_side[1], SHUT_WR);
  });
  tapped.client = net::shake_hands(client_side[0], trust::Role::kClient, client_trust, trust::Purpose::kData, deadline);
  shutdown(client_side[0], SHUT_WR);
  server.join();
  up.join();
  down.join();
  for (int fd : {client_side[0], client_side[1], server_side[0], server_side[1]}) ::close(fd);
  return tapped;
}

trust::Trust encrypted_trust() {
  trust::Trust t;
  t.secret = trust::GroupSecret::parse("pass:a group's secret, later stolen").value();
  t.protection = trust::Protection::kEncrypted;
  return t;
}

TEST(TcpHandshake, ARecordingAndTheGroupSecretDoNotOpenTheSession) {
  const trust::Trust t = encrypted_trust();
  Tapped tapped = shake_through_tap(t, t);
  ASSERT_TRUE(tapped.client.ok()) << tapped.client.status().to_string();
  ASSERT_TRUE(tapped.server.ok()) << tapped.server.status().to_string();
  // Hello and key share each way, then the proofs (and the server's verdict).
  ASSERT_EQ(tapped.client_to_server.size(), trust::kHelloBytes + trust::kShareBytes + trust::kProofBytes);
  ASSERT_EQ(tapped.server_to_client.size(), trust::kHelloBytes + trust::kShareBytes + trust::kProofBytes + 1);

  // A frame of the session: the server opens it.
  const std::vector<uint8_t> header = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<uint8_t> weights(4096, 0x5a);
  std::vector<uint8_t> sent = weights;
  uint8_t tag[trust::kTagBytes];
  tapped.client->seals.outgoing->seal(header.data(), header.size(), sent.data(), sent.size(), tag);
  EXPECT_NE(sent, weights) << "encrypted";
  {
    std::vector<uint8_t> copy = sent;
    EXPECT_TRUE(tapped.server->seals.incoming->open(header.data(), header.size(), copy.data(), copy.size(), tag));
    EXPECT_EQ(copy, weights);
  }
  // Whoever holds the recording and the group secret: the keys of the hellos alone, and those of
  // an exchange completed with a key pair of its own against the recorded halves, open nothing.
  const trust::Hello client_hello = trust::decode_hello(tapped.client_to_server.data(), trust::kHelloBytes).value();
  const trust::Hello server_hello = trust::decode_hello(tapped.server_to_client.data(), trust::kHelloBytes).value();
  trust::Exchange guessed;
  std::copy_n(tapped.client_to_server.begin() + trust::kHelloBytes, trust::kShareBytes, guessed.client.begin());
  std::copy_n(tapped.server_to_client.begin() + trust::kHelloBytes, trust::kShareBytes, guessed.server.begin());
  const trust::KeyShare attacker = trust::KeyShare::fresh().value();
  guessed.agreed = attacker.agree(guessed.server).value();
  const trust::Exchange* none = nullptr;
  const trust::Exchange* attempted = &guessed;
  for (const trust::Exchange* exchange : {none, attempted}) {
    const trust::SessionKeys keys =
        trust::derive_keys(t.secret, client_hello, server_hello, trust::Protection::kEncrypted, exchange).value();
    trust::FrameSeal opener(keys.client_to_server, trust::Protection::kEncrypted);
    std::vector<uint8_t> copy = sent;
    EXPECT_FALSE(opener.open(header.data(), header.size(), copy.data(), copy.size(), tag));
  }
  // The recorded proofs check under the recorded halves: the tap saw the real exchange.
  trust::Exchange recorded = guessed;
  EXPECT_TRUE(trust::check_proof(t.secret, trust::Role::kServer, client_hello, server_hello,
                                 tapped.server_to_client.data() + trust::kHelloBytes + trust::kShareBytes, &recorded)
                  .ok());
}

// The mark in Trust reaches both ends' seals: a frame over it moves both to the next key.
TEST(TcpHandshake, SessionsMoveToTheNextKeyAtTheMarkTheTrustSets) {
  trust::Trust t = encrypted_trust();
  t.rekey_after_bytes = 4096;
  Tapped tapped = shake_through_tap(t, t);
  ASSERT_TRUE(tapped.client.ok()) << tapped.client.status().to_string();
  ASSERT_TRUE(tapped.server.ok()) << tapped.server.status().to_string();
  const std::vector<uint8_t> header(8, 1);
  for (int frame = 0; frame < 4; ++frame) {
    std::vector<uint8_t> payload(3000, static_cast<uint8_t>(frame));
    uint8_t tag[trust::kTagBytes];
    tapped.client->seals.outgoing->seal(header.data(), header.size(), payload.data(), payload.size(), tag);
    ASSERT_TRUE(tapped.server->seals.incoming->open(header.data(), header.size(), payload.data(), payload.size(), tag));
  }
  // Each frame counts 8 + 3000 + 16 bytes: every second one crosses the mark.
  EXPECT_EQ(tapped.client->seals.outgoing->key_generation(), 2u);
  EXPECT_EQ(tapped.server->seals.incoming->key_generation(), 2u);
  // A mark that is not a power of two is refused before anything is sent.
  t.rekey_after_bytes = 5000;
  Tapped refused = shake_through_tap(t, encrypted_trust());
  ASSERT_FALSE(refused.client.ok());
  EXPECT_NE(refused.client.status().message().find("must be a power of two"), std::string::npos)
      << refused.client.status().message();
}

TEST(TcpHandshake, APeerOfAnotherVersionIsRefusedNamingBoth) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  uint8_t hello[trust::kHelloBytes];
  trust::encode_hello(trust::fresh_hello(trust::Protection::kAuthenticated, trust::Purpose::kData).value(), hello);
  hello[4] = 1;  // a version-1 peer: no key shares, no key updates
  ASSERT_EQ(::write(fds[0], hello, sizeof hello), static_cast<ssize_t>(sizeof hello));
  auto session =
      net::shake_hands(fds[1], trust::Role::kServer, encrypted_trust(), trust::Purpose::kData, net::Clock::now() + 2s);
  ASSERT_FALSE(session.ok());
  EXPECT_NE(session.status().message().find("handshake version 1, this side 2"), std::string::npos)
      << session.status().message();
  ::close(fds[0]);
  ::close(fds[1]);
}

}  // namespace
}  // namespace deltacast
