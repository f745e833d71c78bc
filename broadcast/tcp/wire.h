// The TCP backend's wire: frame layout, and socket helpers that never block
// without a deadline. Every frame starts with an 8-byte header
// (u32 magic "DCW1", u8 type, u8 flags, u16 reserved) followed by a body of
// a fixed size per type; SLICE bodies are followed by the payload, read
// straight into the receiver's staging.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "broadcast/transport.h"

namespace deltacast::tcp {

inline constexpr uint32_t kFrameMagic = 0x31574344;  // "DCW1"
inline constexpr uint32_t kProtocolVersion = 1;

enum FrameType : uint8_t {
  kHello = 1,      // sender -> receiver: u32 protocol, u32 rail index, u64 token, u64 sender id
  kHelloAck = 2,   // receiver -> sender: u32 protocol, u32 reserved
  kSlice = 3,      // sender -> receiver: u64 transfer, u64 transfer bytes, u32 slice bytes, u32 index,
                   //   u32 length, u32 reserved, u64 checksum; then `length` payload bytes
  kAck = 4,        // receiver -> sender: u64 transfer, u32 index, u32 status (0 in place, 1 rejected)
  kHeartbeat = 5,  // either way: u64 sender clock (ns)
  kStream = 6,     // sender -> receiver: u64 bytes, then that many raw bytes (the plain-stream baseline)
};

inline constexpr size_t kFrameHeaderBytes = 8;
size_t frame_body_bytes(uint8_t type);  // 0 for unknown types

struct FrameHeader {
  uint8_t type = 0;
  uint8_t flags = 0;
};

void write_frame_header(uint8_t* out, uint8_t type);
Result<FrameHeader> parse_frame_header(const uint8_t* in);

void encode_slice_body(const SliceRef& slice, uint8_t* out);
SliceRef decode_slice_body(const uint8_t* in);

using Clock = std::chrono::steady_clock;

// Reads exactly n bytes before `deadline`; gives up early when *stop turns true.
Status read_full(int fd, void* buffer, size_t n, Clock::time_point deadline, const std::atomic<bool>* stop = nullptr);
// Writes exactly the iovec bytes before `deadline`.
Status write_full(int fd, const void* a, size_t a_len, const void* b, size_t b_len, Clock::time_point deadline,
                  const std::atomic<bool>* stop = nullptr);

struct SocketOptions {
  std::chrono::milliseconds user_timeout{0};  // TCP_USER_TIMEOUT, 0 leaves the default
  uint32_t send_buffer = 0;                   // SO_SNDBUF, 0 leaves the default
};

// A TCP socket created in network namespace `netns` (empty: this thread's own).
Result<int> open_socket(const std::string& netns);
void tune_socket(int fd, const SocketOptions& options);
// A socket bound to `endpoint` (port 0: any free one) and listening; returns
// it with the address actually bound.
Result<std::pair<int, Endpoint>> listen_socket(const std::string& netns, const Endpoint& endpoint, int backlog = 64);
// Connects `fd` from `local` to `remote` within `timeout`.
Status connect_socket(int fd, const Endpoint& local, const Endpoint& remote, std::chrono::milliseconds timeout);
std::string peer_name(int fd);

// Moves the calling thread into a network namespace for good (the threads of
// a channel or listener that works inside one).
Status enter_netns(const std::string& netns);

}  // namespace deltacast::tcp
