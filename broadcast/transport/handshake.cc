#include "broadcast/transport/handshake.h"

#include <exception>

namespace deltacast::net {
namespace {

using trust::Hello;
using trust::Role;

// The server's last word: whether the client's proof held (so a refused client says why).
constexpr uint8_t kAccepted = 1;
constexpr uint8_t kRefused = 0;

Result<Hello> read_hello(int fd, Clock::time_point deadline, const std::atomic<bool>* stop) {
  uint8_t bytes[trust::kHelloBytes];
  DC_RETURN_IF_ERROR(read_full(fd, bytes, sizeof bytes, deadline, stop).with_context("handshake"));
  return trust::decode_hello(bytes, sizeof bytes);
}

std::string_view what_serves(trust::Purpose purpose) {
  switch (purpose) {
    case trust::Purpose::kControl: return "a producer's control port";
    case trust::Purpose::kData: return "a consumer's data rail";
    case trust::Purpose::kCoordinator: return "the group's coordinator";
  }
  return "unknown";
}

// Both ends check the purpose after both hellos are out, so both can name the mix-up.
Status same_purpose(Role role, const Hello& client, const Hello& server) {
  if (client.purpose == server.purpose) return Status();
  if (role == Role::kClient) {
    return permission_denied("handshake: the peer is {}, not {}", what_serves(server.purpose),
                             what_serves(client.purpose));
  }
  return permission_denied("handshake: the peer asked for {}; this is {}", what_serves(client.purpose),
                           what_serves(server.purpose));
}

Status write_hello(int fd, const Hello& hello, Clock::time_point deadline, const std::atomic<bool>* stop) {
  uint8_t bytes[trust::kHelloBytes];
  trust::encode_hello(hello, bytes);
  return write_full(fd, bytes, sizeof bytes, nullptr, 0, deadline, stop).with_context("handshake");
}

Status wrong_secret(std::string_view who) {
  // A replayed or altered handshake fails the same proof: the message names both causes.
  return permission_denied(
      "handshake: wrong secret ({} does not hold this group's secret, or the handshake was replayed or altered on "
      "the way)",
      who);
}

Result<Session> shake_hands_or_throw(int fd, Role role, const trust::Trust& trust, trust::Purpose purpose,
                                     Clock::time_point deadline, const std::atomic<bool>* stop);

}  // namespace

Result<Session> shake_hands(int fd, Role role, const trust::Trust& trust, trust::Purpose purpose,
                            Clock::time_point deadline, const std::atomic<bool>* stop) {
  // libcrypto failing (no random bytes, no HKDF) fails this connection, not the thread serving it.
  try {
    return shake_hands_or_throw(fd, role, trust, purpose, deadline, stop);
  } catch (const std::exception& e) {
    return internal_error("handshake: {}", e.what());
  }
}

namespace {

Result<Session> shake_hands_or_throw(int fd, Role role, const trust::Trust& trust, trust::Purpose purpose,
                                     Clock::time_point deadline, const std::atomic<bool>* stop) {
  const Hello mine = trust::fresh_hello(trust.protection, purpose);
  Hello client, server;
  trust::Protection mode;
  if (role == Role::kClient) {
    DC_RETURN_IF_ERROR(write_hello(fd, mine, deadline, stop));
    DC_ASSIGN_OR_RETURN(server, read_hello(fd, deadline, stop));
    client = mine;
    DC_RETURN_IF_ERROR(same_purpose(role, client, server));
    DC_ASSIGN_OR_RETURN(mode, trust::agree_protection(trust.protection, server.mode));
    uint8_t proof[trust::kProofBytes];
    DC_RETURN_IF_ERROR(read_full(fd, proof, sizeof proof, deadline, stop).with_context("handshake"));
    const bool server_holds_it = trust::proof_is_right(trust.secret, Role::kServer, client, server, proof);
    // This side's proof goes out even when the server's failed, so both ends name the reason.
    const trust::Proof answer = trust::prove(trust.secret, Role::kClient, client, server);
    DC_RETURN_IF_ERROR(write_full(fd, answer.data(), answer.size(), nullptr, 0, deadline, stop));
    if (!server_holds_it) return wrong_secret("the peer");
    uint8_t verdict = kRefused;
    DC_RETURN_IF_ERROR(read_full(fd, &verdict, 1, deadline, stop).with_context("handshake"));
    if (verdict != kAccepted) return permission_denied("handshake: the peer refused this side's proof (wrong secret)");
  } else {
    DC_ASSIGN_OR_RETURN(client, read_hello(fd, deadline, stop));
    server = mine;
    // The hello goes out before purposes and modes are compared, so the client can name them too.
    DC_RETURN_IF_ERROR(write_hello(fd, server, deadline, stop));
    DC_RETURN_IF_ERROR(same_purpose(role, client, server));
    DC_ASSIGN_OR_RETURN(mode, trust::agree_protection(trust.protection, client.mode));
    const trust::Proof proof = trust::prove(trust.secret, Role::kServer, client, server);
    DC_RETURN_IF_ERROR(write_full(fd, proof.data(), proof.size(), nullptr, 0, deadline, stop));
    uint8_t answer[trust::kProofBytes];
    DC_RETURN_IF_ERROR(read_full(fd, answer, sizeof answer, deadline, stop).with_context("handshake"));
    const bool client_holds_it = trust::proof_is_right(trust.secret, Role::kClient, client, server, answer);
    const uint8_t verdict = client_holds_it ? kAccepted : kRefused;
    DC_RETURN_IF_ERROR(write_full(fd, &verdict, 1, nullptr, 0, deadline, stop));
    if (!client_holds_it) return wrong_secret("the peer");
  }
  Session session;
  session.mode = mode;
  session.seals = trust::seals_for(trust::derive_keys(trust.secret, client, server, mode), role);
  return session;
}

}  // namespace

}  // namespace deltacast::net
