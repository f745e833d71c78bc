// The input of fuzz_rail, shared by the target and its seed generator: what a member holding the
// group secret (or a peer with a bug) sends on a TCP data rail once the handshake and HELLO went
// well. Frames the target seals with the connection's session, so they pass their frame tags and
// reach the listener's parsing, staging and leaf checks; what the bytes say is the fuzzer's.
//
// Layout: a byte of options (kEncryptedSession, kPieceHelper), then frames, each
//   u8 kind (kSealPayload), u16 head bytes, u32 payload bytes, u16 given bytes, the head, the
//   payload's first given bytes (zeros after)
// where the head is the frame's header, body and any leaf tags (sealed as the frame's header),
// and the payload goes after it. Zeros after the given bytes keep whole slices (a valid one's
// payload of zeros, say) within a few bytes of input.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "core/byte_io.h"
#include "core/hash.h"
#include "core/trust/group_secret.h"

namespace deltacast::fuzzing {

// Options.
inline constexpr uint8_t kEncryptedSession = 1;  // else authenticated
inline constexpr uint8_t kPieceHelper = 2;       // the listener opens payloads on its helper thread
// Kinds: the frame's tag covers the payload too (as every frame's but a leaf-tagged slice's).
inline constexpr uint8_t kSealPayload = 1;

// What one input may send: a few frames, a few MiB (zeros are cheap to write, not to read).
inline constexpr size_t kMaxHeadBytes = 4096;
inline constexpr uint32_t kMaxPayloadBytes = 1 << 20;
inline constexpr size_t kMaxFrames = 64;
inline constexpr uint64_t kMaxInputPayloadBytes = 4 << 20;

// The transfer the listener expects: slices of five leaves (two hashed pieces), the last one short.
inline constexpr uint64_t kTransfer = 1;
inline constexpr uint32_t kSliceBytes = static_cast<uint32_t>(5 * kHashLeafBytes);
inline constexpr uint64_t kTransferBytes = 3 * uint64_t{kSliceBytes} - 100;

inline trust::GroupSecret rail_secret() { return trust::GroupSecret::from_legacy_token(0xfa11); }

struct RailFrame {
  uint8_t kind = 0;
  std::vector<uint8_t> head;
  std::vector<uint8_t> payload;  // payload bytes long
};

// Gives each payload up to its last non-zero byte (at most 65535 bytes: a seed's payloads past
// that must be zeros).
inline std::vector<uint8_t> encode_rail_input(uint8_t options, const std::vector<RailFrame>& frames) {
  std::vector<uint8_t> out{options};
  for (const RailFrame& f : frames) {
    size_t given = f.payload.size();
    while (given > 0 && f.payload[given - 1] == 0) --given;
    given = std::min<size_t>(given, UINT16_MAX);
    const size_t at = out.size();
    out.resize(at + 9);
    out[at] = f.kind;
    store_le<uint16_t>(out.data() + at + 1, static_cast<uint16_t>(f.head.size()));
    store_le<uint32_t>(out.data() + at + 3, static_cast<uint32_t>(f.payload.size()));
    store_le<uint16_t>(out.data() + at + 7, static_cast<uint16_t>(given));
    out.insert(out.end(), f.head.begin(), f.head.end());
    out.insert(out.end(), f.payload.begin(), f.payload.begin() + static_cast<ptrdiff_t>(given));
  }
  return out;
}

// Reads an input's frames in order; stops at the first that does not fit the limits.
class RailInputReader {
 public:
  RailInputReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  uint8_t options() const { return size_ > 0 ? data_[0] : 0; }

  std::optional<RailFrame> next() {
    if (frames_ == kMaxFrames || at_ + 9 > size_) return std::nullopt;
    RailFrame f;
    f.kind = data_[at_];
    const size_t head = load_le<uint16_t>(data_ + at_ + 1);
    const uint32_t payload = load_le<uint32_t>(data_ + at_ + 3);
    const size_t given = load_le<uint16_t>(data_ + at_ + 7);
    if (head > kMaxHeadBytes || payload > kMaxPayloadBytes || payload_total_ + payload > kMaxInputPayloadBytes ||
        given > payload || at_ + 9 + head + given > size_) {
      return std::nullopt;
    }
    at_ += 9;
    f.head.assign(data_ + at_, data_ + at_ + head);
    at_ += head;
    f.payload.assign(payload, 0);
    if (given > 0) std::memcpy(f.payload.data(), data_ + at_, given);
    at_ += given;
    payload_total_ += payload;
    ++frames_;
    return f;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 1;  // after the options
  size_t frames_ = 0;
  uint64_t payload_total_ = 0;
};

}  // namespace deltacast::fuzzing
