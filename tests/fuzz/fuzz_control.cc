// libFuzzer target: a control message from untrusted bytes, as a control link
// reads one (control_messages.h). Whatever happens: no crash, no sanitizer
// report, and a message that is accepted encodes to one that is accepted
// again and encodes the same (nothing read that cannot be said back).
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "broadcast/engine/control/control_messages.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace deltacast;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto message = control::decode_text(text);
  if (!message.ok()) {
    if (message.status().message().empty()) std::abort();  // a refusal always says why
    return 0;
  }
  const std::string once = control::encode_text(*message);
  auto again = control::decode_text(once);
  if (!again.ok() || control::encode_text(*again) != once) std::abort();
  return 0;
}
