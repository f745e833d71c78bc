#include "broadcast/transport/tcp/wire.h"

#include "core/byte_io.h"

namespace deltacast::tcp {

size_t frame_body_bytes(uint8_t type) {
  switch (type) {
    case kHello: return 24;
    case kHelloAck: return 8;
    case kSlice: return 40;
    case kAck: return 16;
    case kHeartbeat: return 8;
    case kStream: return 8;
    default: return 0;
  }
}

void write_frame_header(uint8_t* out, uint8_t type, uint8_t flags) {
  store_le<uint32_t>(out, kFrameMagic);
  out[4] = type;
  out[5] = flags;
  store_le<uint16_t>(out + 6, 0);
}

Result<FrameHeader> parse_frame_header(const uint8_t* in) {
  const uint32_t magic = load_le<uint32_t>(in);
  if (magic != kFrameMagic) return corrupt("bad frame magic {:#010x}", magic);
  if (frame_body_bytes(in[4]) == 0) return corrupt("unknown frame type {}", in[4]);
  const uint8_t allowed = in[4] == kSlice ? kChecksumTrailer : 0;
  if ((in[5] & ~allowed) != 0 || load_le<uint16_t>(in + 6) != 0) return corrupt("frame flags/reserved bits set");
  return FrameHeader{in[4], in[5]};
}

}  // namespace deltacast::tcp
