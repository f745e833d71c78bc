#include "core/trust/frame_seal.h"

#include <openssl/crypto.h>

#include <cstring>
#include <stdexcept>

#include "core/byte_io.h"

namespace deltacast::trust {

FrameSeal::FrameSeal(const Key& key, Protection mode, uint64_t rekey_after_bytes)
    : mode_(mode), key_(key), library_(aes_gcm_library()), rekey_after_bytes_(rekey_after_bytes) {
  if (rekey_after_bytes == 0) throw std::invalid_argument("FrameSeal: rekey_after_bytes must be positive");
  if (mode != Protection::kInsecure) gcm_ = make_aes_gcm(key, library_);
}

FrameSeal::~FrameSeal() { OPENSSL_cleanse(key_.data(), key_.size()); }

void FrameSeal::count_frame() {
  ++sequence_;
  if (mode_ == Protection::kInsecure) return;
  bytes_under_key_ += kTagBytes;
  if (bytes_under_key_ < rekey_after_bytes_) return;
  Key next = next_key(key_);
  key_ = next;
  OPENSSL_cleanse(next.data(), next.size());
  gcm_ = make_aes_gcm(key_, library_);
  bytes_under_key_ = 0;
  ++generation_;
}

void FrameSeal::start(bool encrypting, uint64_t number, const void* header, size_t header_size) {
  if (broken_) throw std::logic_error("FrameSeal: a frame failed its tag; the connection must be dropped");
  if (mode_ == Protection::kInsecure) return;
  // The nonce: 4 zero bytes and the frame's sequence number. Each direction has its own key, so
  // no (key, nonce) pair is ever used twice.
  uint8_t iv[AesGcm::kIvBytes] = {};
  store_le<uint64_t>(iv + 4, number);
  gcm_->start(encrypting, iv, static_cast<const uint8_t*>(header), header_size,
              mode_ == Protection::kEncrypted ? AesGcm::Payload::kEncrypted : AesGcm::Payload::kTagged);
}

void FrameSeal::process(const void* in, void* out, size_t size) {
  if (size == 0) return;
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  if (mode_ != Protection::kInsecure) gcm_->add(src, dst, size);
  // Tagged or insecure, the payload itself is moved as it is.
  if (mode_ != Protection::kEncrypted && dst != src) std::memmove(dst, src, size);
}

void FrameSeal::begin_counted(bool sealing, const void* header, size_t header_size) {
  start(sealing, sequence_, header, header_size);
  bytes_under_key_ += header_size;
}

void FrameSeal::begin(const void* header, size_t header_size) { begin_counted(true, header, header_size); }

void FrameSeal::add(const void* in, void* out, size_t size) {
  process(in, out, size);
  bytes_under_key_ += size;
}

void FrameSeal::finish(uint8_t tag[kTagBytes]) {
  if (mode_ != Protection::kInsecure) gcm_->tag(tag);
  count_frame();
}

void FrameSeal::begin_open(const void* header, size_t header_size) { begin_counted(false, header, header_size); }

// Opening a payload piece is the same call as sealing one: the mode decides what it does.
void FrameSeal::add_open(const void* in, void* out, size_t size) { add(in, out, size); }

bool FrameSeal::check(const uint8_t tag[kTagBytes]) {
  const bool right = verify(tag);
  if (right) {
    count_frame();
  } else {
    ++sequence_;  // a frame that failed ends the connection: no key after it
  }
  return right;
}

bool FrameSeal::verify(const uint8_t tag[kTagBytes]) {
  if (mode_ == Protection::kInsecure) return true;
  const bool right = gcm_->verify(tag);
  if (!right) broken_ = true;
  return right;
}

void FrameSeal::seal(const void* header, size_t header_size, uint8_t* payload, size_t size, uint8_t tag[kTagBytes]) {
  begin(header, header_size);
  add(payload, payload, size);
  finish(tag);
}

bool FrameSeal::open(const void* header, size_t header_size, uint8_t* payload, size_t size,
                     const uint8_t tag[kTagBytes]) {
  begin_open(header, header_size);
  add_open(payload, payload, size);
  return check(tag);
}

void FrameSeal::tag_numbered(uint64_t number, const void* header, size_t header_size, const uint8_t* payload,
                             size_t size, uint8_t tag[kTagBytes]) {
  if (mode_ == Protection::kEncrypted) throw std::logic_error("FrameSeal: numbered frames are tagged, not encrypted");
  start(true, number, header, header_size);
  process(payload, const_cast<uint8_t*>(payload), size);  // tagged only: nothing is written
  if (mode_ != Protection::kInsecure) gcm_->tag(tag);
}

bool FrameSeal::check_numbered(uint64_t number, const void* header, size_t header_size, const uint8_t* payload,
                               size_t size, const uint8_t tag[kTagBytes]) {
  if (mode_ == Protection::kEncrypted) throw std::logic_error("FrameSeal: numbered frames are tagged, not encrypted");
  start(false, number, header, header_size);
  process(payload, const_cast<uint8_t*>(payload), size);
  return verify(tag);
}

SessionSeals seals_for(const SessionKeys& keys, Role role) {
  SessionSeals seals;
  const bool client = role == Role::kClient;
  const Key& sends = client ? keys.client_to_server : keys.server_to_client;
  const Key& receives = client ? keys.server_to_client : keys.client_to_server;
  seals.outgoing = std::make_unique<FrameSeal>(sends, keys.mode, keys.rekey_after_bytes);
  seals.incoming = std::make_unique<FrameSeal>(receives, keys.mode, keys.rekey_after_bytes);
  return seals;
}

}  // namespace deltacast::trust
