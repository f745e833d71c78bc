#include "core/trust/frame_seal.h"

#include <cstring>
#include <stdexcept>

#include "core/byte_io.h"

namespace deltacast::trust {

FrameSeal::FrameSeal(const Key& key, Protection mode) : mode_(mode) {
  if (mode != Protection::kInsecure) gcm_ = make_aes_gcm(key);
}

FrameSeal::~FrameSeal() = default;

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

void FrameSeal::begin(const void* header, size_t header_size) { start(true, sequence_, header, header_size); }

void FrameSeal::add(const void* in, void* out, size_t size) { process(in, out, size); }

void FrameSeal::finish(uint8_t tag[kTagBytes]) {
  ++sequence_;
  if (mode_ != Protection::kInsecure) gcm_->tag(tag);
}

void FrameSeal::begin_open(const void* header, size_t header_size) { start(false, sequence_, header, header_size); }

void FrameSeal::add_open(const void* in, void* out, size_t size) { process(in, out, size); }

bool FrameSeal::check(const uint8_t tag[kTagBytes]) {
  ++sequence_;
  return verify(tag);
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
  seals.outgoing = std::make_unique<FrameSeal>(client ? keys.client_to_server : keys.server_to_client, keys.mode);
  seals.incoming = std::make_unique<FrameSeal>(client ? keys.server_to_client : keys.client_to_server, keys.mode);
  return seals;
}

}  // namespace deltacast::trust
