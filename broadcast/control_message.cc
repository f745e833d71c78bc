#include "broadcast/control_message.h"

#include "broadcast/tcp/wire.h"
#include "core/byte_io.h"

namespace deltacast {

Status write_message(int fd, const Json& message, ControlClock::time_point deadline, const std::atomic<bool>* stop) {
  const std::string text = message.dump();
  if (text.size() > kMaxControlMessageBytes) return invalid_argument("control message of {} bytes is too large", text.size());
  uint8_t header[8];
  store_le<uint32_t>(header, kControlMagic);
  store_le<uint32_t>(header + 4, static_cast<uint32_t>(text.size()));
  return tcp::write_full(fd, header, sizeof(header), text.data(), text.size(), deadline, stop);
}

Result<Json> read_message(int fd, ControlClock::time_point idle_deadline, std::chrono::milliseconds frame_timeout,
                          const std::atomic<bool>* stop) {
  uint8_t header[8];
  DC_RETURN_IF_ERROR(tcp::read_full(fd, header, sizeof(header), idle_deadline, stop));
  if (load_le<uint32_t>(header) != kControlMagic) return corrupt("not a control message (magic {:#010x})", load_le<uint32_t>(header));
  const uint32_t length = load_le<uint32_t>(header + 4);
  if (length > kMaxControlMessageBytes) return corrupt("control message of {} bytes exceeds the limit", length);
  std::string text(length, '\0');
  DC_RETURN_IF_ERROR(tcp::read_full(fd, text.data(), length, ControlClock::now() + frame_timeout, stop));
  Json message = Json::parse(text, nullptr, false);
  if (message.is_discarded() || !message.is_object()) return corrupt("control message is not a JSON object");
  if (!message.contains("type") || !message["type"].is_string()) return corrupt("control message without a type");
  return message;
}

Json manifest_to_json(const Manifest& manifest) {
  Json tensors = Json::array();
  for (const auto& t : manifest.tensors()) {
    tensors.push_back({{"name", t.name}, {"dtype", std::string(dtype_name(t.dtype))}, {"shape", t.shape}});
  }
  return tensors;
}

Result<Manifest> manifest_from_json(const Json& json) {
  if (!json.is_array()) return corrupt("manifest is not a list");
  if (json.size() > Manifest::kMaxTensors) return corrupt("manifest lists {} tensors", json.size());
  std::vector<TensorSpec> specs;
  for (const auto& t : json) {
    if (!t.is_object()) return corrupt("manifest entry is not an object");
    DC_ASSIGN_OR_RETURN(std::string name, field<std::string>(t, "name"));
    DC_ASSIGN_OR_RETURN(std::string dtype_text, field<std::string>(t, "dtype"));
    DC_ASSIGN_OR_RETURN(std::vector<uint64_t> shape, field<std::vector<uint64_t>>(t, "shape"));
    auto dtype = parse_dtype(dtype_text);
    if (!dtype.ok()) return Status(StatusCode::kCorrupt, dtype.status().message());
    specs.push_back({std::move(name), *dtype, std::move(shape)});
  }
  auto manifest = Manifest::create(std::move(specs));
  if (!manifest.ok()) return Status(StatusCode::kCorrupt, manifest.status().message());
  return manifest;
}

std::string encode_bitmap(const std::vector<uint8_t>& present) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out((present.size() + 7) / 8 * 2, '0');
  for (size_t byte = 0; byte < (present.size() + 7) / 8; ++byte) {
    unsigned v = 0;
    for (unsigned bit = 0; bit < 8 && byte * 8 + bit < present.size(); ++bit) v |= (present[byte * 8 + bit] ? 1u : 0u) << bit;
    out[2 * byte] = kHex[v >> 4];
    out[2 * byte + 1] = kHex[v & 15];
  }
  return out;
}

Result<std::vector<bool>> decode_bitmap(const std::string& hex, size_t bits) {
  if (hex.size() != (bits + 7) / 8 * 2) return corrupt("bitmap of {} hex digits for {} slices", hex.size(), bits);
  std::vector<bool> out(bits);
  const auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t byte = 0; byte < (bits + 7) / 8; ++byte) {
    const int hi = digit(hex[2 * byte]), lo = digit(hex[2 * byte + 1]);
    if (hi < 0 || lo < 0) return corrupt("bitmap is not hex");
    const unsigned v = static_cast<unsigned>(hi * 16 + lo);
    for (unsigned bit = 0; bit < 8 && byte * 8 + bit < bits; ++bit) out[byte * 8 + bit] = (v >> bit) & 1;
  }
  return out;
}

}  // namespace deltacast
