#include "broadcast/engine/control/control_frame.h"

#include "broadcast/transport/socket.h"
#include "core/byte_io.h"

namespace deltacast {

Status write_control_frame(int fd, const std::string& text, trust::FrameSeal& seal, ControlClock::time_point deadline,
                           const std::atomic<bool>* stop) {
  if (text.size() > kMaxControlMessageBytes) return invalid_argument("control message of {} bytes is too large", text.size());
  uint8_t header[8];
  store_le<uint32_t>(header, kControlMagic);
  store_le<uint32_t>(header + 4, static_cast<uint32_t>(text.size()));
  // The text and its tag go out in one write, sealed in a copy (encryption works in place).
  std::string body(text.size() + seal.overhead(), '\0');
  auto* bytes = reinterpret_cast<uint8_t*>(body.data());
  std::copy(text.begin(), text.end(), bytes);
  seal.seal(header, sizeof header, bytes, text.size(), bytes + text.size());
  return net::write_full(fd, header, sizeof(header), body.data(), body.size(), deadline, stop);
}

Result<std::string> read_control_frame(int fd, trust::FrameSeal& seal, ControlClock::time_point idle_deadline,
                                       std::chrono::milliseconds frame_timeout, const std::atomic<bool>* stop) {
  uint8_t header[8];
  DC_RETURN_IF_ERROR(net::read_full(fd, header, sizeof(header), idle_deadline, stop));
  if (load_le<uint32_t>(header) != kControlMagic) {
    return corrupt("not a control message (magic {:#010x})", load_le<uint32_t>(header));
  }
  const uint32_t length = load_le<uint32_t>(header + 4);
  if (length > kMaxControlMessageBytes) return corrupt("control message of {} bytes exceeds the limit", length);
  std::string text(length + seal.overhead(), '\0');
  DC_RETURN_IF_ERROR(net::read_full(fd, text.data(), text.size(), ControlClock::now() + frame_timeout, stop));
  auto* bytes = reinterpret_cast<uint8_t*>(text.data());
  if (!seal.open(header, sizeof header, bytes, length, bytes + length)) {
    return corrupt("a control message failed its authentication tag (altered, replayed, reordered or not from this "
                   "session)");
  }
  text.resize(length);
  return text;
}

}  // namespace deltacast
