// libFuzzer target: a TCP data rail's receiver against a peer that holds the group secret and
// sends whatever it likes (rail_input.h). Each input gets the listener of its session's mode and
// piece-helper setting, expecting one transfer afresh in a buffer with guard bytes on both sides,
// a real handshake and HELLO over loopback, then the input's frames, each sealed with the session
// so it reaches the listener's parsing: slice headers out of range, leaf tags in the wrong session,
// of the wrong count or for the wrong leaves, checksum trailers, truncated payloads, heartbeats and
// streams. The listener must never crash, hang, or write outside the transfer's bytes, and must
// close the connection once the input ends.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <thread>
#include <vector>

#include "broadcast/transport/handshake.h"
#include "broadcast/transport/staging.h"
#include "broadcast/transport/tcp/listener.h"
#include "broadcast/transport/tcp/wire.h"
#include "rail_input.h"

namespace {

using namespace deltacast;
using namespace deltacast::fuzzing;
using std::chrono::milliseconds;

constexpr size_t kGuardBytes = 4096;
constexpr uint8_t kGuard = 0xA5;

trust::Trust rail_trust(trust::Protection mode) {
  trust::Trust t;
  t.secret = rail_secret();
  t.protection = mode;
  return t;
}

// A listener per session mode and helper setting, each with its staging area, kept across inputs
// (closing a listener waits out its threads' 50 ms polls). Every input's transfer lands in one
// guarded buffer; only the input's own connection writes there.
struct Rig {
  StagingArea staging;
  std::unique_ptr<tcp::TcpListener> listener;
};

Rig& rig_for(trust::Protection mode, PieceHelperMode helper) {
  static std::map<std::pair<trust::Protection, PieceHelperMode>, std::unique_ptr<Rig>> rigs;
  auto& rig = rigs[{mode, helper}];
  if (!rig) {
    rig = std::make_unique<Rig>();
    ListenOptions options;
    options.trust = rail_trust(mode);
    options.handshake_timeout = milliseconds(2000);
    options.frame_timeout = milliseconds(500);
    options.idle_timeout = milliseconds(2000);
    options.piece_helper = helper;
    auto listener = tcp::TcpListener::create({Endpoint{"127.0.0.1", 0}}, &rig->staging, options);
    if (!listener.ok()) std::abort();
    rig->listener = std::move(listener).value();
  }
  return *rig;
}

int dial(const Endpoint& to) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(to.port);
  inet_pton(AF_INET, to.host.c_str(), &a.sin_addr);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) std::abort();
  return fd;
}

bool send_all(int fd, const std::vector<uint8_t>& bytes) {
  return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
}

// The sender's side of the HELLO exchange, as a channel does it (the listener must accept it).
void say_hello(int fd, net::Session& session) {
  std::vector<uint8_t> hello(tcp::kFrameHeaderBytes + 24, 0);
  tcp::write_frame_header(hello.data(), tcp::kHello);
  store_le<uint32_t>(hello.data() + 8, tcp::kProtocolVersion);
  const auto deadline = net::Clock::now() + milliseconds(2000);
  if (!tcp::write_sealed(fd, *session.seals.outgoing, hello.data(), hello.size(), deadline, nullptr).ok()) std::abort();
  uint8_t ack[tcp::kFrameHeaderBytes + 8];
  if (!net::read_full(fd, ack, sizeof(ack), deadline, nullptr).ok() ||
      !tcp::read_tag(fd, *session.seals.incoming, ack, sizeof(ack), deadline, nullptr).ok()) {
    std::abort();
  }
}

// Reads what the listener sends (acknowledgements, heartbeats) until it closes the connection;
// false if it still has not 5 s after the input ended.
bool closed_by_listener(int fd) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  timeval tv{0, 200000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  uint8_t buf[4096];
  while (std::chrono::steady_clock::now() < give_up) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n == 0) return true;
    if (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) return true;  // reset: closed too
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RailInputReader input(data, size);
  const auto mode =
      (input.options() & kEncryptedSession) ? trust::Protection::kEncrypted : trust::Protection::kAuthenticated;
  Rig& rig = rig_for(mode, (input.options() & kPieceHelper) ? PieceHelperMode::kOn : PieceHelperMode::kOff);
  static std::vector<uint8_t> memory(kGuardBytes + kTransferBytes + kGuardBytes);
  std::fill(memory.begin(), memory.begin() + kGuardBytes, kGuard);
  std::fill(memory.end() - kGuardBytes, memory.end(), kGuard);
  rig.staging.forget(kTransfer);
  if (!rig.staging.expect(kTransfer, kTransferBytes, kSliceBytes, memory.data() + kGuardBytes).ok()) std::abort();

  const int fd = dial(rig.listener->endpoints()[0]);
  auto session = net::shake_hands(fd, trust::Role::kClient, rail_trust(mode), trust::Purpose::kData,
                                  net::Clock::now() + milliseconds(2000));
  if (!session.ok()) std::abort();
  say_hello(fd, *session);
  trust::FrameSeal& seal = *session->seals.outgoing;
  while (auto frame = input.next()) {
    std::vector<uint8_t> bytes = std::move(frame->head);
    const size_t head = bytes.size();
    bytes.insert(bytes.end(), frame->payload.begin(), frame->payload.end());
    seal.begin(bytes.data(), head);
    if (frame->kind & kSealPayload) seal.add(bytes.data() + head, bytes.data() + head, bytes.size() - head);
    uint8_t tag[trust::kTagBytes];
    seal.finish(tag);
    bytes.insert(bytes.end(), tag, tag + seal.overhead());
    if (!send_all(fd, bytes)) break;  // the listener dropped the connection
  }
  shutdown(fd, SHUT_WR);
  if (!closed_by_listener(fd)) std::abort();
  ::close(fd);
  // The connection's thread is done with the staging before the next input forgets the transfer.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (rig.listener->live_connections() > 0) {
    if (std::chrono::steady_clock::now() > give_up) std::abort();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  for (size_t i = 0; i < kGuardBytes; ++i) {
    if (memory[i] != kGuard || memory[memory.size() - 1 - i] != kGuard) std::abort();  // written outside the transfer
  }
  return 0;
}
