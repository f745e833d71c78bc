// libFuzzer target: what an attacker can send before and after a handshake. The first byte
// picks what the rest is:
//   0: the client's side of a handshake (hello, X25519 key share, proof), read by a server (the
//      producer's, a coordinator's or a data rail's): it must never succeed (the input cannot
//      prove a secret over the server's fresh nonce and key share) and must refuse with a reason;
//   1, 2: bytes read as control frames of an established session (authenticated, encrypted):
//      none may open (a forged tag), each refusal says why;
//   3: a hello, decoded: refused with a reason or decoded to fields in range.
// No crash, no sanitizer report, no hang (every read has a deadline and the writer hangs up).
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>

#include "broadcast/engine/control/control_frame.h"
#include "broadcast/transport/handshake.h"

namespace {

using namespace deltacast;

trust::Trust fuzz_trust() {
  trust::Trust t;
  t.secret = trust::GroupSecret::from_legacy_token(0xf022);
  return t;
}

// A session's receiving seal with fixed keys (the fuzzer cannot know them either way).
std::unique_ptr<trust::FrameSeal> receiving_seal(trust::Protection mode) {
  trust::Hello client, server;
  client.nonce.fill(1);
  server.nonce.fill(2);
  client.mode = server.mode = mode;
  return std::move(trust::seals_for(trust::derive_keys(fuzz_trust().secret, client, server, mode).value(), trust::Role::kServer)
                       .incoming);
}

// The input on one end of a socket pair, the other end handed to `read`.
template <typename Read>
void over_socket(const uint8_t* data, size_t size, Read read) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) std::abort();
  // Small inputs fit the socket buffer: written whole before the reader starts, then hung up.
  if (size > 0 && ::write(fds[0], data, size) != static_cast<ssize_t>(size)) std::abort();
  shutdown(fds[0], SHUT_WR);
  read(fds[1]);
  ::close(fds[0]);
  ::close(fds[1]);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > 60000) return 0;
  const uint8_t pick = data[0] % 4;
  ++data;
  --size;
  const auto soon = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  if (pick == 0) {
    over_socket(data, size, [&](int fd) {
      auto session = net::shake_hands(fd, trust::Role::kServer, fuzz_trust(), trust::Purpose::kControl, soon);
      if (session.ok() || session.status().message().empty()) std::abort();
    });
  } else if (pick == 1 || pick == 2) {
    auto seal = receiving_seal(pick == 1 ? trust::Protection::kAuthenticated : trust::Protection::kEncrypted);
    over_socket(data, size, [&](int fd) {
      auto frame = read_control_frame(fd, *seal, soon, std::chrono::milliseconds(50));
      if (frame.ok() || frame.status().message().empty()) std::abort();
    });
  } else {
    auto hello = trust::decode_hello(data, size);
    if (!hello.ok()) {
      if (hello.status().message().empty()) std::abort();
    } else if (hello->mode > trust::Protection::kEncrypted || static_cast<uint8_t>(hello->purpose) == 0 ||
               static_cast<uint8_t>(hello->purpose) > 3 ||
               !trust::rekey_mark_log2(uint64_t{1} << hello->rekey_log2).ok()) {
      std::abort();
    }
  }
  return 0;
}
