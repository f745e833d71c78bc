#include "core/buffer_pool.h"

#include <algorithm>

namespace deltacast {

namespace {
// A buffer much larger than needed is left for a request that needs it.
bool fits(size_t have, size_t want) { return have >= want && have <= std::max(2 * want, want + (1u << 20)); }
}  // namespace

BufferPool::BufferPool(size_t keep) : shared_(std::make_shared<Shared>()) { shared_->keep = keep; }

std::shared_ptr<AlignedBuffer> BufferPool::acquire(size_t bytes) {
  AlignedBuffer buffer;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    auto& free = shared_->free;
    auto best = free.end();
    for (auto it = free.begin(); it != free.end(); ++it) {
      if (fits(it->size(), bytes) && (best == free.end() || it->size() < best->size())) best = it;
    }
    if (best != free.end()) {
      buffer = std::move(*best);
      free.erase(best);
    }
  }
  if (buffer.data() == nullptr) buffer = AlignedBuffer(bytes);
  std::weak_ptr<Shared> home = shared_;
  auto* raw = new AlignedBuffer(std::move(buffer));
  return std::shared_ptr<AlignedBuffer>(raw, [home](AlignedBuffer* b) {
    if (auto pool = home.lock(); pool && b->size() > 0) {
      std::lock_guard<std::mutex> lock(pool->mu);
      pool->free.push_back(std::move(*b));
      // Keep the largest few.
      std::sort(pool->free.begin(), pool->free.end(),
                [](const AlignedBuffer& x, const AlignedBuffer& y) { return x.size() > y.size(); });
      while (pool->free.size() > pool->keep) pool->free.pop_back();
    }
    delete b;
  });
}

size_t BufferPool::idle() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->free.size();
}

}  // namespace deltacast
