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
  const uint8_t allowed = in[4] == kSlice ? kChecksumTrailer | kLeafTagged : 0;
  if ((in[5] & ~allowed) != 0 || load_le<uint16_t>(in + 6) != 0) return corrupt("frame flags/reserved bits set");
  if ((in[5] & kChecksumTrailer) != 0 && (in[5] & kLeafTagged) != 0) {
    return corrupt("a slice with leaf tags and a checksum after its payload");
  }
  return FrameHeader{in[4], in[5]};
}

Status write_sealed(int fd, trust::FrameSeal& seal, const uint8_t* frame, size_t bytes, Clock::time_point deadline,
                    const std::atomic<bool>* stop) {
  uint8_t tag[trust::kTagBytes];
  seal.seal(frame, bytes, nullptr, 0, tag);
  return net::write_full(fd, frame, bytes, tag, seal.overhead(), deadline, stop);
}

Status check_tag(int fd, trust::FrameSeal& seal, Clock::time_point deadline, const std::atomic<bool>* stop) {
  uint8_t tag[trust::kTagBytes] = {};
  if (seal.overhead() > 0) DC_RETURN_IF_ERROR(net::read_full(fd, tag, seal.overhead(), deadline, stop));
  return seal.check(tag) ? Status() : tag_failed();
}

Status read_tag(int fd, trust::FrameSeal& seal, const uint8_t* frame, size_t bytes, Clock::time_point deadline,
                const std::atomic<bool>* stop) {
  seal.begin_open(frame, bytes);
  return check_tag(fd, seal, deadline, stop);
}

Status tag_failed() {
  return corrupt("a frame failed its authentication tag (altered, dropped, replayed or not from this session)");
}

}  // namespace deltacast::tcp
