#include "broadcast/engine/control/control_frame.h"

#include "broadcast/transport/socket.h"
#include "core/byte_io.h"

namespace deltacast {

Status write_control_frame(int fd, const std::string& text, ControlClock::time_point deadline,
                           const std::atomic<bool>* stop) {
  if (text.size() > kMaxControlMessageBytes) return invalid_argument("control message of {} bytes is too large", text.size());
  uint8_t header[8];
  store_le<uint32_t>(header, kControlMagic);
  store_le<uint32_t>(header + 4, static_cast<uint32_t>(text.size()));
  return net::write_full(fd, header, sizeof(header), text.data(), text.size(), deadline, stop);
}

Result<std::string> read_control_frame(int fd, ControlClock::time_point idle_deadline,
                                       std::chrono::milliseconds frame_timeout, const std::atomic<bool>* stop) {
  uint8_t header[8];
  DC_RETURN_IF_ERROR(net::read_full(fd, header, sizeof(header), idle_deadline, stop));
  if (load_le<uint32_t>(header) != kControlMagic) {
    return corrupt("not a control message (magic {:#010x})", load_le<uint32_t>(header));
  }
  const uint32_t length = load_le<uint32_t>(header + 4);
  if (length > kMaxControlMessageBytes) return corrupt("control message of {} bytes exceeds the limit", length);
  std::string text(length, '\0');
  DC_RETURN_IF_ERROR(net::read_full(fd, text.data(), length, ControlClock::now() + frame_timeout, stop));
  return text;
}

}  // namespace deltacast
