// Little-endian loads and stores, and a bounds-checked reader for bytes that
// came from outside the process. Every on-wire integer in deltacast is
// little-endian; the reader never reads past its span and reports what was
// missing instead.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/status.h"

namespace deltacast {

static_assert(std::endian::native == std::endian::little, "deltacast assumes a little-endian host");

template <typename T>
inline T load_le(const uint8_t* p) {
  static_assert(std::is_trivially_copyable_v<T>);
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

template <typename T>
inline void store_le(uint8_t* p, T value) {
  static_assert(std::is_trivially_copyable_v<T>);
  std::memcpy(p, &value, sizeof(T));
}

// Appends little-endian values to a growing byte vector.
class ByteWriter {
 public:
  explicit ByteWriter(std::vector<uint8_t>* out) : out_(out) {}

  template <typename T>
  void put(T value) {
    const size_t at = out_->size();
    out_->resize(at + sizeof(T));
    store_le<T>(out_->data() + at, value);
  }
  void put_bytes(const void* data, size_t size) {
    const auto* p = static_cast<const uint8_t*>(data);
    out_->insert(out_->end(), p, p + size);
  }
  void put_string(std::string_view s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    put_bytes(s.data(), s.size());
  }

 private:
  std::vector<uint8_t>* out_;
};

// Reads little-endian values from untrusted bytes. Each read checks the
// remaining length and fails with a kCorrupt Status naming `what`.
class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  size_t remaining() const { return bytes_.size() - pos_; }
  size_t position() const { return pos_; }
  bool at_end() const { return pos_ == bytes_.size(); }

  template <typename T>
  Status get(T* value, std::string_view what) {
    if (remaining() < sizeof(T)) return truncated(what, sizeof(T));
    *value = load_le<T>(bytes_.data() + pos_);
    pos_ += sizeof(T);
    return Status();
  }
  Status get_bytes(size_t size, std::span<const uint8_t>* out, std::string_view what) {
    if (remaining() < size) return truncated(what, size);
    *out = bytes_.subspan(pos_, size);
    pos_ += size;
    return Status();
  }
  // A u32 length followed by that many bytes, at most `max_size` long.
  Status get_string(std::string* out, size_t max_size, std::string_view what);

 private:
  Status truncated(std::string_view what, size_t wanted) const {
    return corrupt("truncated input reading {}: need {} bytes at offset {}, {} left", what, wanted, pos_, remaining());
  }

  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

inline Status ByteReader::get_string(std::string* out, size_t max_size, std::string_view what) {
  uint32_t size = 0;
  DC_RETURN_IF_ERROR(get(&size, what));
  if (size > max_size) return corrupt("{} is {} bytes long, more than the limit of {}", what, size, max_size);
  std::span<const uint8_t> bytes;
  DC_RETURN_IF_ERROR(get_bytes(size, &bytes, what));
  out->assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return Status();
}

}  // namespace deltacast
