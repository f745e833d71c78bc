// The TCP backend's wire: the frame layout. Every frame starts with an 8-byte
// header (u32 magic "DCW1", u8 type, u8 flags, u16 reserved) followed by a
// body of a fixed size per type; a SLICE body (the shared slice header,
// slice_header.h) is followed by the payload, read straight into the
// receiver's staging. A SLICE with flag kChecksumTrailer carries 0 in the
// header's checksum and the real one in 8 bytes after the payload: the sender
// hashes each piece of the payload right after the kernel copied it (so the
// hash reads cache, not memory) and only knows the checksum at the end.
// A SLICE with flag kLeafTagged (authenticated sessions only) carries its leaves' tags
// (core/trust/leaf_tag.h) between the body and the payload: the buffer's 16-byte salt, then 16
// bytes per 64 KiB leaf the slice holds. The frame's own tag then covers the header, the body and
// those tags, and the payload is checked leaf by leaf against them instead.
#pragma once

#include <cstddef>
#include <cstdint>

#include "broadcast/transport/slice_header.h"
#include "broadcast/transport/socket.h"
#include "core/trust/frame_seal.h"
#include "core/trust/leaf_tag.h"

namespace deltacast::tcp {

inline constexpr uint32_t kFrameMagic = 0x31574344;  // "DCW1"
// 2: slice checksums are content hashes (core/hash.h); 3: the trust handshake
// (broadcast/transport/handshake.h) before HELLO, and no token in HELLO; 4: leaf-tagged slices
// (kLeafTagged), which a version-3 receiver would refuse mid-stream as flags it does not know.
inline constexpr uint32_t kProtocolVersion = 4;

enum FrameType : uint8_t {
  kHello = 1,      // sender -> receiver: u32 protocol, u32 rail index, u64 reserved (0), u64 sender id
  kHelloAck = 2,   // receiver -> sender: u32 protocol, u32 reserved
  kSlice = 3,      // sender -> receiver: u64 transfer, u64 transfer bytes, u32 slice bytes, u32 index,
                   //   u32 length, u32 reserved, u64 checksum; then `length` payload bytes
  kAck = 4,        // receiver -> sender: u64 transfer, u32 index, u32 status (0 in place, 1 rejected)
  kHeartbeat = 5,  // either way: u64 sender clock (ns)
  kStream = 6,     // sender -> receiver: u64 bytes, then that many raw bytes (the plain-stream baseline)
};

inline constexpr size_t kFrameHeaderBytes = 8;
inline constexpr size_t kChecksumTrailerBytes = 8;
// Payloads are hashed in pieces of this size right after they are copied
// (into the socket by the sender, out of it by the receiver), while in L2.
inline constexpr uint32_t kHashedPieceBytes = 256 << 10;

enum FrameFlags : uint8_t {
  kChecksumTrailer = 1,  // SLICE only: the payload's checksum follows it (u64)
  kLeafTagged = 2,       // SLICE only: salt and leaf tags before the payload (not with kChecksumTrailer)
};
// The bytes kLeafTagged puts before a slice's payload.
inline size_t leaf_tag_block_bytes(uint32_t leaves) { return trust::kLeafSaltBytes + leaves * trust::kLeafTagBytes; }
size_t frame_body_bytes(uint8_t type);  // 0 for unknown types

struct FrameHeader {
  uint8_t type = 0;
  uint8_t flags = 0;
};

void write_frame_header(uint8_t* out, uint8_t type, uint8_t flags = 0);
Result<FrameHeader> parse_frame_header(const uint8_t* in);

using net::Clock;

// Every frame after the trust handshake, HELLO included, is sealed with the connection's session
// (core/trust/frame_seal.h): its header and fixed body are authenticated as associated data, its
// payload (a slice's, a stream's, and a slice's checksum trailer) authenticated or encrypted, and
// the tag (16 bytes; none in an insecure session) follows the payload. Both ends count frames in
// each direction, so a frame altered, dropped, replayed or moved fails its tag.

// Writes a frame without payload: `frame` (header and body, `bytes`), then its tag.
Status write_sealed(int fd, trust::FrameSeal& seal, const uint8_t* frame, size_t bytes, Clock::time_point deadline,
                    const std::atomic<bool>* stop);
// Reads the tag after a frame without payload (`frame`: its header and body, already read) and
// checks it; a frame that fails is refused and the connection must be dropped.
Status read_tag(int fd, trust::FrameSeal& seal, const uint8_t* frame, size_t bytes, Clock::time_point deadline,
                const std::atomic<bool>* stop);
// Reads the tag after a frame whose payload went through seal.add_open() and checks it.
Status check_tag(int fd, trust::FrameSeal& seal, Clock::time_point deadline, const std::atomic<bool>* stop);
Status tag_failed();

}  // namespace deltacast::tcp
