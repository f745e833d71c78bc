#include "sparse/value_codec.h"

namespace deltacast {

std::string_view value_codec_name(ValueCodec codec) { return codec == ValueCodec::kUlp ? "ulp" : "raw"; }

Result<ValueCodec> parse_value_codec(std::string_view name) {
  if (name == "ulp") return ValueCodec::kUlp;
  if (name == "raw") return ValueCodec::kRaw;
  return invalid_argument("unknown value codec '{}' (expected ulp or raw)", name);
}

}  // namespace deltacast
