// Leaf tags: authenticated mode's proof that a payload is the one its producer made, made once
// where a buffer's bytes are made and carried unchanged by every hop that sends them.
//
// A connection's frame seal (frame_seal.h) tags what its sender writes, so every hop that sends a
// slice reads its payload twice: once to tag it, once for the kernel's copy. Leaf tags are made
// once for a whole buffer (a version's transfer), one per 64 KiB leaf (the content hash's leaves,
// core/hash.h), under a key every member of the group derives from the secret and a salt fresh for
// that buffer (leaf_tag_key). A slice that starts on a leaf then goes out with its leaves' tags in
// its frame's header; the sender tags only the header, and the receiver checks each leaf of the
// payload against its tag as it lands: per hop one pass over the payload (the receiver's) where
// frame tags take two. An attacker without the secret can make no leaf tag, so a payload altered,
// or moved from another place or buffer, fails; the frame seal still covers the header (the salt
// and the tags among it) and numbers the connection's frames.
//
// GMAC (AES-256-GCM with the payload as associated data), through aes_gcm.h. The nonce is the
// leaf's index, unique under a salt used for one buffer only; the buffer's size is associated data.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "core/trust/aes_gcm.h"
#include "core/trust/group_secret.h"
#include "core/trust/handshake.h"

namespace deltacast::trust {

inline constexpr size_t kLeafTagBytes = AesGcm::kTagBytes;
using LeafTag = std::array<uint8_t, kLeafTagBytes>;

// A salt fresh from the operating system's random source: one per buffer tagged (an error if the
// source fails).
Result<LeafSalt> fresh_leaf_salt();

// Makes and checks the leaf tags of one salt. One leaf at a time (one thread); make one per
// thread to tag in parallel.
class LeafTagger {
 public:
  static Result<std::unique_ptr<LeafTagger>> make(const GroupSecret& secret, const LeafSalt& salt);
  static Result<std::unique_ptr<LeafTagger>> make(const GroupSecret& secret, const LeafSalt& salt,
                                                  AesGcmLibrary library);
  ~LeafTagger();

  const LeafSalt& salt() const { return salt_; }

  // Leaf `index` of a buffer of `buffer_bytes`, held whole.
  LeafTag tag(uint64_t buffer_bytes, uint64_t index, const uint8_t* leaf, size_t size);

  // Checking a leaf as it lands: begin, add its pieces in order, then verify (constant time).
  void begin(uint64_t buffer_bytes, uint64_t index);
  void add(const uint8_t* piece, size_t size);
  bool verify(const LeafTag& tag);

 private:
  LeafTagger(const LeafSalt& salt, std::unique_ptr<AesGcm> gcm) : salt_(salt), gcm_(std::move(gcm)) {}
  void start(bool sealing, uint64_t buffer_bytes, uint64_t index);

  LeafSalt salt_;
  std::unique_ptr<AesGcm> gcm_;
};

// Consecutive leaf tags of a buffer under `salt`, from leaf `first_leaf` on: a whole buffer's (as
// its maker makes them; content_hash_leaf_count(size) of them, an empty buffer having one empty
// leaf) or one slice's (as a receiver got them, to send on); with what a receiver needs to check
// them.
struct LeafTags {
  LeafSalt salt{};
  uint64_t buffer_bytes = 0;
  uint64_t first_leaf = 0;
  std::vector<LeafTag> tags;
  const LeafTag& of(uint64_t leaf) const { return tags[leaf - first_leaf]; }
};
// Tags every leaf of `data` in parallel on `pool` (one tagger per run of leaves), under a salt
// fresh from the random source: a salt must tag one buffer only (a second buffer's leaves under
// the same key and nonces would give GMAC's hash key away).
Result<LeafTags> make_leaf_tags(const GroupSecret& secret, const uint8_t* data, size_t size, ThreadPool& pool);
// The same under a given salt: for tests, which hold the tags to a reference.
Result<LeafTags> make_leaf_tags(const GroupSecret& secret, const LeafSalt& salt, const uint8_t* data, size_t size,
                                ThreadPool& pool);

}  // namespace deltacast::trust
