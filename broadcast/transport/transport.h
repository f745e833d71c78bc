// The transport interface every backend (tcp/, fake/, later rdma/) implements,
// shaped for one-sided placement: the receiver exposes staging memory through
// a SliceSink, and the sender places a slice's bytes at its offset there and
// learns of completion. Backends only move bytes; which rail carries which
// slice, deadlines and retries belong to the Sprayer (TENT's split between a
// policy runtime and thin transports).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "broadcast/transport/piece_helper.h"
#include "broadcast/transport/rail.h"
#include "core/hash.h"
#include "core/status.h"
#include "core/trust/leaf_tag.h"
#include "core/trust/trust.h"

namespace deltacast {

using Millis = std::chrono::milliseconds;

// One slice of a transfer: bytes [index * slice_bytes, + length) of a
// transfer of transfer_bytes. Every slice but the last has slice_bytes.
struct SliceRef {
  uint64_t transfer = 0;
  uint64_t transfer_bytes = 0;
  uint32_t slice_bytes = 0;
  uint32_t index = 0;
  uint32_t length = 0;
  // content_hash() of the slice's bytes (core/hash.h: XXH3-64 of each 64 KiB
  // leaf, then of the leaf digests): computed once where the bytes were made,
  // or derived from that buffer's leaf digests when slices start on leaves.
  uint64_t checksum = 0;
  // False: not computed yet; the channel computes it just before it sends the
  // bytes, so that the hash and the send read them from memory once.
  bool has_checksum = true;
  // The transfer's leaf tags (core/trust/leaf_tag.h), where its maker tagged its bytes: an
  // authenticated session then sends a slice that starts on a leaf with its leaves' tags and tags
  // only the frame's header (leaf_tags_fit).
  std::shared_ptr<const trust::LeafTags> leaf_tags = nullptr;

  uint64_t offset() const { return static_cast<uint64_t>(index) * slice_bytes; }
  // Whether leaf_tags are for a buffer of this transfer's size and hold this slice's leaves, and
  // the slice starts on a leaf and lies inside the transfer.
  bool leaf_tags_fit() const {
    return leaf_tags != nullptr && leaf_tags->buffer_bytes == transfer_bytes && slice_bytes != 0 &&
           slice_bytes % kHashLeafBytes == 0 && length != 0 && offset() + length <= transfer_bytes &&
           leaf_tags->first_leaf <= first_leaf() &&
           first_leaf() + leaf_count() <= leaf_tags->first_leaf + leaf_tags->tags.size();
  }
  uint64_t first_leaf() const { return offset() / kHashLeafBytes; }
  uint32_t leaf_count() const { return static_cast<uint32_t>((length + kHashLeafBytes - 1) / kHashLeafBytes); }
};

// Runs exactly once per send: ok when the receiver confirmed the bytes are in
// place and verified, an error otherwise (connection lost, rejected, closed).
using SliceDone = std::function<void(Status)>;

// The sender's end of one rail to one receiver.
class Channel {
 public:
  virtual ~Channel() = default;
  // Queues a slice; never blocks on the network and never calls `done` from
  // inside send(). `data` must stay valid until `done` runs. The slices of one
  // transfer come from one buffer of transfer_bytes (data - slice.offset() is
  // its start), which a backend may register once for all of them (RDMA).
  virtual void send(const SliceRef& slice, const uint8_t* data, SliceDone done) = 0;
  // Connected and taking slices.
  virtual bool ready() const = 0;
  // Drops the current connection (whatever it still holds fails) and
  // reconnects: how a rail whose link stalled silently is given a fresh start.
  virtual void reset() = 0;
  virtual void close() = 0;
  virtual const RailSpec& rail() const = 0;
  // What the last connection's two ends agreed on (the stronger of their requirements), or
  // nothing before the first connection and on backends without sessions.
  virtual std::optional<trust::Protection> protection() const { return std::nullopt; }
  // How long since the receiver was last heard on this rail (an acknowledgement or one of its
  // heartbeats), or nothing where the backend cannot tell: a receiver still heard is alive and
  // its path works, however long its slices take to cross a slow or far link.
  virtual std::optional<Millis> receiver_silent_for() const { return std::nullopt; }
  // Bytes a cold connection sends in its first round trip before its window doubles per round
  // trip (TCP's slow start), or 0 where the backend has none: the sprayer's deadlines wait for
  // it, or a far rail's copies miss them whenever it starts cold.
  virtual uint32_t initial_window() const { return 0; }
};

// Waits until `channel` is connected and taking slices; false when `timeout` passed first.
inline bool wait_ready(const Channel& channel, Millis timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!channel.ready()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(Millis(5));
  }
  return true;
}

// What a channel calls on a slice it is about to send (see SliceRef::has_checksum).
inline void ensure_checksum(SliceRef& slice, const uint8_t* bytes) {
  if (slice.has_checksum) return;
  slice.checksum = content_hash(bytes, slice.length);
  slice.has_checksum = true;
}

// What a receiving backend checks once a payload is in place.
inline bool checksum_matches(const SliceRef& slice, const uint8_t* bytes) {
  return content_hash(bytes, slice.length) == slice.checksum;
}

// Where a slice's payload goes on the receiver.
struct Landing {
  uint8_t* bytes = nullptr;    // nullptr: a duplicate to read and discard
  std::shared_ptr<void> hold;  // keeps the sink's state for this slice alive until complete()
  uint64_t generation = 0;     // which copy owns the slot (a newer copy may supersede a stalled one)
};

// Aborts a backend's receive of one slice (TCP: shuts its connection down).
using CancelReceive = std::function<void()>;

// The receiver's staging memory and arrival state, shared by every listener
// and rail. Backends call begin() for each slice header and complete() once
// its payload is in place; they never write anywhere begin() did not hand out.
class SliceSink {
 public:
  virtual ~SliceSink() = default;
  // Validates an untrusted slice header; an error drops the connection.
  // `cancel` aborts this receive if a newer copy of the slice supersedes it.
  virtual Result<Landing> begin(const SliceRef& slice, CancelReceive cancel) = 0;
  // The payload landed; `verified` tells whether its checksum matched.
  // Returns false when the slice was not accepted (the sender is told to resend).
  virtual bool complete(const SliceRef& slice, const Landing& landing, bool verified) = 0;
};

class Listener {
 public:
  virtual ~Listener() = default;
  // Bound addresses ("ip:port"), in the order requested.
  virtual std::vector<Endpoint> endpoints() const = 0;
  virtual void close() = 0;
};

struct TransportCapabilities {
  bool one_sided = false;            // the NIC places bytes without receiver CPU work (RDMA)
  bool needs_registration = false;   // staging must be registered with the device first
  uint32_t max_slice_bytes = 0;
};

struct ChannelOptions {
  trust::Trust trust;                        // the group's secret and the protection this end requires
  uint32_t rail_index = 0;
  Millis connect_timeout{500};
  Millis user_timeout{1500};                 // TCP_USER_TIMEOUT: unacknowledged data fails the connection
  Millis heartbeat{50};
  uint32_t send_buffer_bytes = 1 << 20;      // bounds what the kernel queues on a rail
  // Tag, encrypt and hash payloads on a helper thread beside the writer (piece_helper.h).
  PieceHelperMode piece_helper = PieceHelperMode::kAuto;
  std::string netns;                         // network namespace to open sockets in (tests)
};

// A channel still dialling its first connection counts as not silent (Channel::receiver_silent_for)
// for the dial grace: across a WAN the connect and the handshake's round trips take a while on
// loaded cores. Not once kUnansweredDials connects in a row failed, unanswered within the connect
// timeout or refused: the path is cut or nobody listens there, which those connects take to tell.
inline Millis dial_grace(const ChannelOptions& options) { return 4 * options.connect_timeout; }
constexpr int kUnansweredDials = 2;
inline Millis cut_path_dial_grace(const ChannelOptions& options) { return kUnansweredDials * options.connect_timeout; }
// What receiver_silent_for says of a channel dialling its first connection for `trying`: not
// silent within `grace`, silent since it was made after that.
inline Millis silence_while_dialling(std::chrono::steady_clock::duration trying, Millis grace) {
  return trying < grace ? Millis(0) : std::chrono::duration_cast<Millis>(trying);
}

struct ListenOptions {
  trust::Trust trust;
  Millis handshake_timeout{2000};
  Millis frame_timeout{10000};               // a started frame must finish within this (slow-loris)
  Millis idle_timeout{10000};                // no frame at all for this long drops the connection
  Millis heartbeat{50};
  uint32_t max_connections = 256;
  uint32_t max_slice_bytes = 64 << 20;
  // Open (check or decrypt) and hash payloads on a helper thread beside each connection's reader.
  PieceHelperMode piece_helper = PieceHelperMode::kAuto;
  std::string netns;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string_view name() const = 0;
  virtual TransportCapabilities capabilities() const = 0;
  virtual Result<std::unique_ptr<Channel>> connect(const RailSpec& rail, const ChannelOptions& options) = 0;
  virtual Result<std::unique_ptr<Listener>> listen(const std::vector<Endpoint>& endpoints, SliceSink* sink,
                                                   const ListenOptions& options) = 0;
};

}  // namespace deltacast
