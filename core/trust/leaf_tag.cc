#include "core/trust/leaf_tag.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <algorithm>

#include "core/byte_io.h"
#include "core/hash.h"

namespace deltacast::trust {

Result<LeafSalt> fresh_leaf_salt() {
  LeafSalt salt;
  if (RAND_bytes(salt.data(), static_cast<int>(salt.size())) != 1) {
    return internal_error("no random bytes for a leaf-tag salt from libcrypto");
  }
  return salt;
}

Result<std::unique_ptr<LeafTagger>> LeafTagger::make(const GroupSecret& secret, const LeafSalt& salt) {
  return make(secret, salt, aes_gcm_library());
}

Result<std::unique_ptr<LeafTagger>> LeafTagger::make(const GroupSecret& secret, const LeafSalt& salt,
                                                     AesGcmLibrary library) {
  DC_ASSIGN_OR_RETURN(Key key, leaf_tag_key(secret, salt));
  std::unique_ptr<AesGcm> gcm = make_aes_gcm(key, library);
  OPENSSL_cleanse(key.data(), key.size());
  return std::unique_ptr<LeafTagger>(new LeafTagger(salt, std::move(gcm)));
}

LeafTagger::~LeafTagger() = default;

void LeafTagger::start(bool sealing, uint64_t buffer_bytes, uint64_t index) {
  // The nonce: the leaf's index, unique under a salt that tags one buffer.
  uint8_t iv[AesGcm::kIvBytes];
  store_le<uint64_t>(iv, index);
  store_le<uint32_t>(iv + 8, 0);
  // The buffer's size, so that a buffer cut short or grown fails its last leaf.
  uint8_t header[8];
  store_le<uint64_t>(header, buffer_bytes);
  gcm_->start(sealing, iv, header, sizeof header, AesGcm::Payload::kTagged);
}

LeafTag LeafTagger::tag(uint64_t buffer_bytes, uint64_t index, const uint8_t* leaf, size_t size) {
  start(true, buffer_bytes, index);
  add(leaf, size);
  LeafTag out;
  gcm_->tag(out.data());
  return out;
}

void LeafTagger::begin(uint64_t buffer_bytes, uint64_t index) { start(false, buffer_bytes, index); }

void LeafTagger::add(const uint8_t* piece, size_t size) {
  // kTagged reads `in` only: nothing is written through `out`.
  if (size > 0) gcm_->add(piece, const_cast<uint8_t*>(piece), size);
}

bool LeafTagger::verify(const LeafTag& tag) { return gcm_->verify(tag.data()); }

Result<LeafTags> make_leaf_tags(const GroupSecret& secret, const uint8_t* data, size_t size, ThreadPool& pool) {
  DC_ASSIGN_OR_RETURN(const LeafSalt salt, fresh_leaf_salt());
  return make_leaf_tags(secret, salt, data, size, pool);
}

Result<LeafTags> make_leaf_tags(const GroupSecret& secret, const LeafSalt& salt, const uint8_t* data, size_t size,
                                ThreadPool& pool) {
  LeafTags out;
  out.salt = salt;
  out.buffer_bytes = size;
  out.tags.resize(content_hash_leaf_count(size));
  // Contiguous runs of leaves per task, one tagger (one key schedule) each.
  const size_t leaves = out.tags.size();
  const size_t tasks = std::min<size_t>(leaves, 4 * static_cast<size_t>(pool.size()));
  DC_RETURN_IF_ERROR(parallel_for_status(pool, tasks, [&](size_t t) -> Status {
    DC_ASSIGN_OR_RETURN(auto tagger, LeafTagger::make(secret, salt));
    for (size_t i = leaves * t / tasks; i < leaves * (t + 1) / tasks; ++i) {
      const size_t offset = i * kHashLeafBytes;
      const size_t n = std::min<size_t>(kHashLeafBytes, size - std::min(size, offset));
      out.tags[i] = tagger->tag(size, i, data + std::min(size, offset), n);
    }
    return Status();
  }));
  return out;
}

}  // namespace deltacast::trust
