#include "broadcast/transport/handshake.h"

#include <cstring>

namespace deltacast::net {
namespace {

using trust::Hello;
using trust::Role;

// The server's last word: whether the client's proof held (so a refused client says why).
constexpr uint8_t kAccepted = 1;
constexpr uint8_t kRefused = 0;

// A hello and the key share right behind it (TCP connections always send both). The hello is
// decoded before the share is read, so a peer of another version is refused naming it.
Result<Hello> read_hello(int fd, trust::Share* share, Clock::time_point deadline, const std::atomic<bool>* stop) {
  uint8_t bytes[trust::kHelloBytes];
  DC_RETURN_IF_ERROR(read_full(fd, bytes, sizeof bytes, deadline, stop).with_context("handshake"));
  DC_ASSIGN_OR_RETURN(Hello hello, trust::decode_hello(bytes, sizeof bytes));
  DC_RETURN_IF_ERROR(read_full(fd, share->data(), share->size(), deadline, stop).with_context("handshake"));
  return hello;
}

Status write_hello(int fd, const Hello& hello, const trust::Share& share, Clock::time_point deadline,
                   const std::atomic<bool>* stop) {
  uint8_t bytes[trust::kHelloBytes + trust::kShareBytes];
  trust::encode_hello(hello, bytes);
  std::memcpy(bytes + trust::kHelloBytes, share.data(), share.size());
  return write_full(fd, bytes, sizeof bytes, nullptr, 0, deadline, stop).with_context("handshake");
}

}  // namespace

Result<Session> shake_hands(int fd, Role role, const trust::Trust& trust, trust::Purpose purpose,
                            Clock::time_point deadline, const std::atomic<bool>* stop) {
  DC_ASSIGN_OR_RETURN(const uint8_t rekey_log2, trust::rekey_mark_log2(trust.rekey_after_bytes));
  DC_ASSIGN_OR_RETURN(const Hello mine, trust::fresh_hello(trust.protection, purpose, rekey_log2));
  DC_ASSIGN_OR_RETURN(const trust::KeyShare my_share, trust::KeyShare::fresh());
  Hello client, server;
  trust::Exchange exchange;
  trust::Protection mode;
  if (role == Role::kClient) {
    DC_RETURN_IF_ERROR(write_hello(fd, mine, my_share.share(), deadline, stop));
    DC_ASSIGN_OR_RETURN(server, read_hello(fd, &exchange.server, deadline, stop));
    client = mine;
    exchange.client = my_share.share();
    DC_ASSIGN_OR_RETURN(mode, trust::agree_terms(role, trust.protection, client, server));
    DC_ASSIGN_OR_RETURN(exchange.agreed, my_share.agree(exchange.server));
    uint8_t proof[trust::kProofBytes];
    DC_RETURN_IF_ERROR(read_full(fd, proof, sizeof proof, deadline, stop).with_context("handshake"));
    const Status server_holds_it = trust::check_proof(trust.secret, Role::kServer, client, server, proof, &exchange);
    // This side's proof goes out even when the server's failed, so both ends name the reason.
    const trust::Proof answer = trust::prove(trust.secret, Role::kClient, client, server, &exchange);
    DC_RETURN_IF_ERROR(write_full(fd, answer.data(), answer.size(), nullptr, 0, deadline, stop));
    DC_RETURN_IF_ERROR(server_holds_it);
    uint8_t verdict = kRefused;
    DC_RETURN_IF_ERROR(read_full(fd, &verdict, 1, deadline, stop).with_context("handshake"));
    if (verdict != kAccepted) return permission_denied("handshake: the peer refused this side's proof (wrong secret)");
  } else {
    DC_ASSIGN_OR_RETURN(client, read_hello(fd, &exchange.client, deadline, stop));
    server = mine;
    exchange.server = my_share.share();
    // The hello goes out before purposes and modes are compared, so the client can name them too.
    DC_RETURN_IF_ERROR(write_hello(fd, server, exchange.server, deadline, stop));
    DC_ASSIGN_OR_RETURN(mode, trust::agree_terms(role, trust.protection, client, server));
    DC_ASSIGN_OR_RETURN(exchange.agreed, my_share.agree(exchange.client));
    const trust::Proof proof = trust::prove(trust.secret, Role::kServer, client, server, &exchange);
    DC_RETURN_IF_ERROR(write_full(fd, proof.data(), proof.size(), nullptr, 0, deadline, stop));
    uint8_t answer[trust::kProofBytes];
    DC_RETURN_IF_ERROR(read_full(fd, answer, sizeof answer, deadline, stop).with_context("handshake"));
    const Status client_holds_it = trust::check_proof(trust.secret, Role::kClient, client, server, answer, &exchange);
    const uint8_t verdict = client_holds_it.ok() ? kAccepted : kRefused;
    DC_RETURN_IF_ERROR(write_full(fd, &verdict, 1, nullptr, 0, deadline, stop));
    DC_RETURN_IF_ERROR(client_holds_it);
  }
  Session session;
  DC_ASSIGN_OR_RETURN(trust::SessionKeys keys, trust::derive_keys(trust.secret, client, server, mode, &exchange));
  keys.rekey_after_bytes = trust.rekey_after_bytes;
  session.seals = trust::seals_for(keys, role);
  return session;
}

}  // namespace deltacast::net
