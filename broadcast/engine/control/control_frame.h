// How control messages travel on a control connection: each is one frame,
// u32 magic "DCC1" + u32 length + that many bytes of JSON text
// (control_messages.h says what the text may hold) + the session's tag
// (core/trust/frame_seal.h: 16 bytes unless the session is insecure; the text
// is encrypted in an encrypted session). The connection's handshake
// (broadcast/transport/handshake.h) made the seals. Every frame is untrusted,
// bounded in size, read against a deadline and opened before it is parsed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "core/trust/frame_seal.h"

namespace deltacast {

inline constexpr uint32_t kControlMagic = 0x31434344;           // "DCC1"
inline constexpr uint32_t kMaxControlMessageBytes = 64u << 20;  // a join carries the manifest

using ControlClock = std::chrono::steady_clock;

// `seal`: the session's outgoing seal; one writer at a time.
Status write_control_frame(int fd, const std::string& text, trust::FrameSeal& seal, ControlClock::time_point deadline,
                           const std::atomic<bool>* stop = nullptr);
// Reads one frame's text; `idle_deadline` bounds the wait for it to start,
// `frame_timeout` how long it may take once started. `seal`: the session's incoming seal; a
// frame that fails it (altered, replayed, reordered or from another session) is refused, and
// the connection must be dropped.
Result<std::string> read_control_frame(int fd, trust::FrameSeal& seal, ControlClock::time_point idle_deadline,
                                       std::chrono::milliseconds frame_timeout, const std::atomic<bool>* stop = nullptr);

}  // namespace deltacast
