// Control-plane messages between the coordinator (inside the producer) and
// consumers: JSON objects, each framed as u32 magic "DCC1" + u32 length +
// the JSON text. Small and infrequent, so readability wins over compactness;
// every frame is untrusted, bounded in size and read against a deadline.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/manifest.h"
#include "core/status.h"

namespace deltacast {

using Json = nlohmann::json;

inline constexpr uint32_t kControlMagic = 0x31434344;           // "DCC1"
inline constexpr uint32_t kMaxControlMessageBytes = 64u << 20;  // a join carries the manifest

// Message types ("type" field).
namespace msg {
inline constexpr const char* kJoin = "join";              // consumer -> coordinator
inline constexpr const char* kWelcome = "welcome";        // coordinator -> consumer
inline constexpr const char* kReject = "reject";          // coordinator -> consumer, then close
inline constexpr const char* kHeartbeat = "heartbeat";    // both ways
inline constexpr const char* kVersion = "version";        // coordinator -> consumer: a version to stage
inline constexpr const char* kPlan = "plan";              // coordinator -> consumer: who forwards to whom
inline constexpr const char* kProgress = "progress";      // consumer -> coordinator: slices held
inline constexpr const char* kStaged = "staged";          // consumer -> coordinator: all slices, verified
inline constexpr const char* kCommitted = "committed";    // consumer -> coordinator: applied
inline constexpr const char* kFailed = "failed";          // consumer -> coordinator: could not apply
inline constexpr const char* kDone = "done";              // coordinator -> consumer: version finished everywhere
inline constexpr const char* kCheck = "check";            // coordinator -> consumer: hash your tensors
inline constexpr const char* kChecked = "checked";        // consumer -> coordinator: version held and its hash
}  // namespace msg

using ControlClock = std::chrono::steady_clock;

Status write_message(int fd, const Json& message, ControlClock::time_point deadline,
                     const std::atomic<bool>* stop = nullptr);
// Reads one message; `idle_deadline` bounds the wait for it to start,
// `frame_timeout` how long it may take once started.
Result<Json> read_message(int fd, ControlClock::time_point idle_deadline, std::chrono::milliseconds frame_timeout,
                          const std::atomic<bool>* stop = nullptr);

// The manifest as a list of {name, dtype, shape}; parsing validates it.
Json manifest_to_json(const Manifest& manifest);
Result<Manifest> manifest_from_json(const Json& json);

// Slice-presence bitmaps as hex text (bit i of byte i / 8).
std::string encode_bitmap(const std::vector<uint8_t>& present);
Result<std::vector<bool>> decode_bitmap(const std::string& hex, size_t bits);

// Reads field `key` of an untrusted message as T, or fails naming the field.
template <typename T>
Result<T> field(const Json& message, const char* key) {
  auto it = message.find(key);
  if (it == message.end()) return corrupt("control message without '{}'", key);
  try {
    return it->get<T>();
  } catch (const std::exception&) {
    return corrupt("control message field '{}' has the wrong type", key);
  }
}

}  // namespace deltacast
