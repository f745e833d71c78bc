// Seeds for fuzz_rail (rail_input.h): frames a proper sender writes to the transfer the target's
// listener expects (its payloads zeros, so each seed is a few hundred bytes), in both protected
// modes, inline and with the piece helper: whole slices with their checksums, leaf-tagged slices
// with their salt and tags, a checksum trailer, a heartbeat and a plain stream.
#include <fstream>
#include <string>
#include <vector>

#include "broadcast/transport/slice_header.h"
#include "broadcast/transport/tcp/wire.h"
#include "core/hash.h"
#include "core/trust/leaf_tag.h"
#include "rail_input.h"

namespace {

using namespace deltacast;
using namespace deltacast::fuzzing;

void write_seed(const std::string& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
  std::ofstream out(dir + "/" + name, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

uint32_t slice_length(uint32_t index) {
  return static_cast<uint32_t>(std::min<uint64_t>(kSliceBytes, kTransferBytes - uint64_t{index} * kSliceBytes));
}

std::vector<uint8_t> slice_head(uint32_t index, uint32_t length, uint64_t checksum, uint8_t flags) {
  std::vector<uint8_t> head(tcp::kFrameHeaderBytes + kSliceHeaderBytes);
  tcp::write_frame_header(head.data(), tcp::kSlice, flags);
  encode_slice_header(SliceRef{kTransfer, kTransferBytes, kSliceBytes, index, length, checksum},
                      head.data() + tcp::kFrameHeaderBytes);
  return head;
}

// Slice `index` of zeros, its checksum in its header, sealed with its payload.
RailFrame whole_slice(uint32_t index) {
  const std::vector<uint8_t> zeros(slice_length(index), 0);
  return {kSealPayload, slice_head(index, slice_length(index), content_hash(zeros.data(), zeros.size()), 0), zeros};
}

// Slice `index` of zeros with its leaves' tags under `salt`: the frame's tag covers the head only.
RailFrame leaf_tagged_slice(uint32_t index, const trust::LeafSalt& salt) {
  const uint32_t length = slice_length(index);
  const std::vector<uint8_t> zeros(length, 0);
  RailFrame f{0, slice_head(index, length, content_hash(zeros.data(), zeros.size()), tcp::kLeafTagged), zeros};
  f.head.insert(f.head.end(), salt.begin(), salt.end());
  auto tagger = trust::LeafTagger::make(rail_secret(), salt).value();
  const uint64_t first = uint64_t{index} * kSliceBytes / kHashLeafBytes;
  for (uint64_t at = 0; at < length; at += kHashLeafBytes) {
    const size_t leaf = std::min<size_t>(kHashLeafBytes, length - at);
    const trust::LeafTag tag = tagger->tag(kTransferBytes, first + at / kHashLeafBytes, zeros.data() + at, leaf);
    f.head.insert(f.head.end(), tag.begin(), tag.end());
  }
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string dir = argv[1];
  trust::LeafSalt salt;
  for (size_t i = 0; i < salt.size(); ++i) salt[i] = static_cast<uint8_t>(i * 7 + 1);

  // A checksum trailer (of zeros: the payload is read and refused for its checksum, the connection kept).
  RailFrame trailer{kSealPayload, slice_head(0, kSliceBytes, 0, tcp::kChecksumTrailer),
                    std::vector<uint8_t>(kSliceBytes + tcp::kChecksumTrailerBytes, 0)};
  RailFrame heartbeat{0, std::vector<uint8_t>(tcp::kFrameHeaderBytes + 8, 0), {}};
  tcp::write_frame_header(heartbeat.head.data(), tcp::kHeartbeat);
  RailFrame stream{kSealPayload, std::vector<uint8_t>(tcp::kFrameHeaderBytes + 8, 0), std::vector<uint8_t>(1000, 0)};
  tcp::write_frame_header(stream.head.data(), tcp::kStream);
  store_le<uint64_t>(stream.head.data() + tcp::kFrameHeaderBytes, stream.payload.size());

  for (const uint8_t helper : {uint8_t{0}, kPieceHelper}) {
    const std::string suffix = helper ? "-helped" : "-inline";
    for (const uint8_t mode : {uint8_t{0}, kEncryptedSession}) {
      const std::string name = (mode ? "encrypted" : "authenticated") + suffix;
      write_seed(dir, "slices-" + name, encode_rail_input(mode | helper, {whole_slice(0), whole_slice(2), heartbeat}));
      write_seed(dir, "others-" + name, encode_rail_input(mode | helper, {stream, trailer}));
    }
    write_seed(dir, "leaf-tagged" + suffix,
               encode_rail_input(helper, {leaf_tagged_slice(2, salt), leaf_tagged_slice(0, salt), whole_slice(1)}));
  }
  return 0;
}
