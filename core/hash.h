// Hashing of tensor and bucket bytes.
//
// `content_hash` is a two-level tree over XXH3-64 so that a GPU can compute
// the same value in parallel: the input is cut into 64 KiB leaves, each leaf
// is hashed with XXH3-64 (seed 0), and the little-endian array of leaf
// digests is hashed again with XXH3-64 seeded with the input length. The
// definition is part of the bucket format (sparse/FORMAT.md); never change it
// without bumping the format version.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace deltacast {

inline constexpr size_t kHashLeafBytes = 64 * 1024;

class ThreadPool;

// Plain XXH3-64 of a byte range.
uint64_t xxh3_64(const void* data, size_t size, uint64_t seed = 0);

// XXH3-64 fed piece by piece (the same value as xxh3_64 over the pieces
// concatenated): how a receiver hashes a payload as it lands, while each
// piece is still in cache, instead of in a second pass over memory.
class Xxh3Stream {
 public:
  Xxh3Stream();
  ~Xxh3Stream();
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;

  void reset(uint64_t seed = 0);
  void update(const void* data, size_t size);
  uint64_t digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The tree hash described above. Empty input is one empty leaf.
uint64_t content_hash(const void* data, size_t size);

// content_hash() fed piece by piece as the bytes land: each leaf is hashed as
// soon as it is complete (in one shot when a piece holds it whole), while it is
// still in cache, so the check costs no second pass over memory.
class ContentHashStream {
 public:
  void reset();
  void update(const void* data, size_t size);
  // content_hash() of everything fed since reset().
  uint64_t digest() const;

 private:
  std::vector<uint64_t> leaves_;  // digests of the complete leaves
  Xxh3Stream partial_;            // the leaf in progress when a piece ended inside it
  size_t partial_bytes_ = 0;
  size_t total_ = 0;
};

// The leaf digests of content_hash(data, size), in order (content_hash_leaf_count(size) of them):
// what a producer keeps for a buffer so that the content hash of any leaf-aligned range of it
// (content_hash_from_leaves over that range's leaves) costs no pass over the bytes.
std::vector<uint64_t> content_hash_leaves(const void* data, size_t size, ThreadPool& pool);

// Finishes a content hash from precomputed leaf digests (how a GPU or a
// multi-threaded caller that hashed the leaves itself gets the same value).
uint64_t content_hash_from_leaves(const uint64_t* leaf_digests, size_t leaf_count, size_t total_size);

struct TensorView;

// content_hash() with the leaves hashed in parallel on `pool` (same value).
uint64_t content_hash(const void* data, size_t size, ThreadPool& pool);

// One value for a whole model: XXH3-64 of the little-endian array of every
// tensor's content_hash, in order. Host tensors; hashed in parallel.
uint64_t model_hash(const TensorView* tensors, size_t count, ThreadPool& pool);
// The model hash from each tensor's content_hash, in manifest order (how model_hash combines them).
uint64_t model_hash_of(std::span<const uint64_t> tensor_hashes);

inline size_t content_hash_leaf_count(size_t size) {
  return size == 0 ? 1 : (size + kHashLeafBytes - 1) / kHashLeafBytes;
}

}  // namespace deltacast
