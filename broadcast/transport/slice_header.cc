#include "broadcast/transport/slice_header.h"

#include "core/byte_io.h"

namespace deltacast {

void encode_slice_header(const SliceRef& s, uint8_t* out) {
  store_le<uint64_t>(out, s.transfer);
  store_le<uint64_t>(out + 8, s.transfer_bytes);
  store_le<uint32_t>(out + 16, s.slice_bytes);
  store_le<uint32_t>(out + 20, s.index);
  store_le<uint32_t>(out + 24, s.length);
  store_le<uint32_t>(out + 28, 0);
  store_le<uint64_t>(out + 32, s.checksum);
}

SliceRef decode_slice_header(const uint8_t* in) {
  SliceRef s;
  s.transfer = load_le<uint64_t>(in);
  s.transfer_bytes = load_le<uint64_t>(in + 8);
  s.slice_bytes = load_le<uint32_t>(in + 16);
  s.index = load_le<uint32_t>(in + 20);
  s.length = load_le<uint32_t>(in + 24);
  s.checksum = load_le<uint64_t>(in + 32);
  return s;
}

}  // namespace deltacast
