// Sealing one direction of a connection after its handshake: every frame gets a 16-byte
// AES-256-GCM tag over its header (associated data) and payload, under the direction's key and a
// nonce made of the frame's sequence number (a TCP slice sent with its leaf tags, leaf_tag.h,
// carries them in its header and leaves its payload outside the frame's tag: its leaves' tags
// cover it). Both ends count frames, so a frame dropped, replayed, reordered or moved from another
// connection fails its tag. Encrypted mode also encrypts the payload; authenticated mode only tags
// it (GMAC: the payload is associated data). Insecure mode does nothing and adds no tag.
//
// Key updates: once a direction has sealed `rekey_after_bytes` (payloads, headers and tags) under
// one key, both ends move to the next key (next_key) after the frame that crossed the mark, and the
// sequence numbers go on. Both ends see the same frames in the same order, so they move together
// with no message; a peer that did not would fail the next frame's tag.
//
// One sealer per direction, used by one thread at a time (the connection's writer or reader).
// A frame is sealed in pieces (begin, add as the payload is produced, finish) so large slices are
// tagged as they are copied, never read twice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/status.h"
#include "core/trust/aes_gcm.h"
#include "core/trust/handshake.h"

namespace deltacast::trust {

inline constexpr size_t kTagBytes = AesGcm::kTagBytes;

class FrameSeal {
 public:
  FrameSeal(const Key& key, Protection mode, uint64_t rekey_after_bytes = kRekeyAfterBytes);
  ~FrameSeal();
  FrameSeal(const FrameSeal&) = delete;
  FrameSeal& operator=(const FrameSeal&) = delete;

  Protection mode() const { return mode_; }
  // Bytes a sealed frame adds (0 in insecure mode).
  size_t overhead() const { return mode_ == Protection::kInsecure ? 0 : kTagBytes; }
  // Frames sealed (or opened) so far: the next frame's sequence number.
  uint64_t sequence() const { return sequence_; }
  // Key updates so far (0: the session's first key). Numbered frames count toward none.
  uint64_t key_generation() const { return generation_; }

  // Sender: begin the next frame with its header; add its payload (encrypted in place in
  // encrypted mode: `out` may equal `in`); finish writes the tag.
  void begin(const void* header, size_t header_size);
  void add(const void* in, void* out, size_t size);
  void finish(uint8_t tag[kTagBytes]);

  // Receiver: the same, decrypting in encrypted mode; check() says whether the tag is the one the
  // frame owes (in constant time). A frame that fails leaves the seal unusable: the connection
  // must be dropped.
  void begin_open(const void* header, size_t header_size);
  void add_open(const void* in, void* out, size_t size);
  bool check(const uint8_t tag[kTagBytes]);

  // One call for a frame held whole.
  void seal(const void* header, size_t header_size, uint8_t* payload, size_t size, uint8_t tag[kTagBytes]);
  bool open(const void* header, size_t header_size, uint8_t* payload, size_t size, const uint8_t tag[kTagBytes]);

  // Frames numbered by the caller, for a path whose frames are checked in another order than they
  // were sent (RDMA: a slice's write lands after its offer, and the writes of several offers
  // complete in any order). Both ends number frames the same way (the order they went out in); the
  // counted sequence above is not touched, so one seal serves one kind of numbering only. The
  // payload is only tagged: an encrypting seal refuses (std::logic_error).
  void tag_numbered(uint64_t number, const void* header, size_t header_size, const uint8_t* payload, size_t size,
                    uint8_t tag[kTagBytes]);
  bool check_numbered(uint64_t number, const void* header, size_t header_size, const uint8_t* payload, size_t size,
                      const uint8_t tag[kTagBytes]);

 private:
  void start(bool encrypting, uint64_t number, const void* header, size_t header_size);
  // A counted frame's start (begin, begin_open): its header counts toward the key-update mark.
  void begin_counted(bool sealing, const void* header, size_t header_size);
  bool verify(const uint8_t tag[kTagBytes]);
  void process(const void* in, void* out, size_t size);
  // After a counted frame: its bytes toward the mark, and the next key once it is crossed.
  void count_frame();

  Protection mode_;
  bool broken_ = false;
  uint64_t sequence_ = 0;
  Key key_{};              // the current key (for the next one)
  AesGcmLibrary library_;  // kept across key updates
  uint64_t rekey_after_bytes_;
  uint64_t bytes_under_key_ = 0;  // counted frames' bytes, the one in progress too
  uint64_t generation_ = 0;
  std::unique_ptr<AesGcm> gcm_;  // null in insecure mode
};

// The two seals of one end of a session: `outgoing` seals what it sends, `incoming` opens what it
// receives.
struct SessionSeals {
  std::unique_ptr<FrameSeal> outgoing;
  std::unique_ptr<FrameSeal> incoming;
};
SessionSeals seals_for(const SessionKeys& keys, Role role);

}  // namespace deltacast::trust
