// How control messages travel on a control connection: each is one frame,
// u32 magic "DCC1" + u32 length + that many bytes of JSON text
// (control_messages.h says what the text may hold). Every frame is untrusted,
// bounded in size and read against a deadline.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace deltacast {

inline constexpr uint32_t kControlMagic = 0x31434344;           // "DCC1"
inline constexpr uint32_t kMaxControlMessageBytes = 64u << 20;  // a join carries the manifest

using ControlClock = std::chrono::steady_clock;

Status write_control_frame(int fd, const std::string& text, ControlClock::time_point deadline,
                           const std::atomic<bool>* stop = nullptr);
// Reads one frame's text; `idle_deadline` bounds the wait for it to start,
// `frame_timeout` how long it may take once started.
Result<std::string> read_control_frame(int fd, ControlClock::time_point idle_deadline,
                                       std::chrono::milliseconds frame_timeout, const std::atomic<bool>* stop = nullptr);

}  // namespace deltacast
