#include "core/hash.h"

#include <xxhash.h>
#if defined(__x86_64__)
// The dispatching entry points pick the widest vector unit the CPU has at run
// time (AVX-512, AVX2, SSE2); same values, several times the speed of the
// baseline SSE2 build on cache-resident data. The header renames XXH3_64bits*.
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <memory>
#include <new>
#include <vector>

#include "core/tensor_view.h"
#include "core/thread_pool.h"

namespace deltacast {

uint64_t xxh3_64(const void* data, size_t size, uint64_t seed) { return XXH3_64bits_withSeed(data, size, seed); }

struct Xxh3Stream::State {
  XXH3_state_t* state = XXH3_createState();
  ~State() { XXH3_freeState(state); }
};

Xxh3Stream::Xxh3Stream() : state_(std::make_unique<State>()) {
  if (state_->state == nullptr) throw std::bad_alloc();
  reset();
}
Xxh3Stream::~Xxh3Stream() = default;
void Xxh3Stream::reset(uint64_t seed) { XXH3_64bits_reset_withSeed(state_->state, seed); }
void Xxh3Stream::update(const void* data, size_t size) { XXH3_64bits_update(state_->state, data, size); }
uint64_t Xxh3Stream::digest() const { return XXH3_64bits_digest(state_->state); }

uint64_t content_hash_from_leaves(const uint64_t* leaf_digests, size_t leaf_count, size_t total_size) {
  // Digests are stored as u64 in host order; the host is little-endian (byte_io.h), which is the
  // order the definition asks for.
  return XXH3_64bits_withSeed(leaf_digests, leaf_count * sizeof(uint64_t), static_cast<uint64_t>(total_size));
}

uint64_t content_hash(const void* data, size_t size) {
  const size_t leaves = content_hash_leaf_count(size);
  const auto* bytes = static_cast<const uint8_t*>(data);
  // Small inputs (every bucket header, most chunks) need no heap allocation.
  uint64_t small[64];
  std::vector<uint64_t> large;
  uint64_t* digests = small;
  if (leaves > 64) {
    large.resize(leaves);
    digests = large.data();
  }
  for (size_t i = 0; i < leaves; ++i) {
    const size_t offset = i * kHashLeafBytes;
    const size_t length = size - offset < kHashLeafBytes ? size - offset : kHashLeafBytes;
    digests[i] = XXH3_64bits(bytes + offset, length);
  }
  return content_hash_from_leaves(digests, leaves, size);
}

void ContentHashStream::reset() {
  leaves_.clear();
  partial_bytes_ = 0;
  total_ = 0;
}

void ContentHashStream::update(const void* data, size_t size) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  total_ += size;
  while (size > 0) {
    if (partial_bytes_ == 0 && size >= kHashLeafBytes) {
      leaves_.push_back(XXH3_64bits(bytes, kHashLeafBytes));
      bytes += kHashLeafBytes;
      size -= kHashLeafBytes;
      continue;
    }
    if (partial_bytes_ == 0) partial_.reset();
    const size_t n = std::min(size, kHashLeafBytes - partial_bytes_);
    partial_.update(bytes, n);
    partial_bytes_ += n;
    bytes += n;
    size -= n;
    if (partial_bytes_ == kHashLeafBytes) {
      leaves_.push_back(partial_.digest());
      partial_bytes_ = 0;
    }
  }
}

uint64_t ContentHashStream::digest() const {
  if (total_ == 0) return content_hash(nullptr, 0);
  if (partial_bytes_ == 0) return content_hash_from_leaves(leaves_.data(), leaves_.size(), total_);
  std::vector<uint64_t> all(leaves_);
  all.push_back(partial_.digest());
  return content_hash_from_leaves(all.data(), all.size(), total_);
}

std::vector<uint64_t> content_hash_leaves(const void* data, size_t size, ThreadPool& pool) {
  const size_t leaves = content_hash_leaf_count(size);
  std::vector<uint64_t> digests(leaves);
  const auto* bytes = static_cast<const uint8_t*>(data);
  constexpr size_t kLeavesPerTask = 64;
  const auto hash_task = [&](size_t task) {
    const size_t end = std::min(leaves, (task + 1) * kLeavesPerTask);
    for (size_t leaf = task * kLeavesPerTask; leaf < end; ++leaf) {
      const size_t offset = leaf * kHashLeafBytes;
      digests[leaf] = XXH3_64bits(bytes + offset, std::min<size_t>(kHashLeafBytes, size - offset));
    }
  };
  const size_t tasks = (leaves + kLeavesPerTask - 1) / kLeavesPerTask;
  if (tasks == 1 || pool.size() == 1) {
    for (size_t t = 0; t < tasks; ++t) hash_task(t);
  } else {
    pool.parallel_for(tasks, hash_task);
  }
  return digests;
}

uint64_t content_hash(const void* data, size_t size, ThreadPool& pool) {
  if (content_hash_leaf_count(size) <= 16 || pool.size() == 1) return content_hash(data, size);
  const std::vector<uint64_t> digests = content_hash_leaves(data, size, pool);
  return content_hash_from_leaves(digests.data(), digests.size(), size);
}

uint64_t model_hash(const TensorView* tensors, size_t count, ThreadPool& pool) {
  std::vector<uint64_t> hashes(count);
  pool.parallel_for(count, [&](size_t i) { hashes[i] = content_hash(tensors[i].data, tensors[i].nbytes()); });
  return model_hash_of(hashes);
}

uint64_t model_hash_of(std::span<const uint64_t> tensor_hashes) {
  return XXH3_64bits(tensor_hashes.data(), tensor_hashes.size() * sizeof(uint64_t));
}

}  // namespace deltacast
