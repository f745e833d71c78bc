// Seeds for fuzz_trust: a proper client hello and key share (then a proof of zeros), a sealed control frame of
// another session, and hellos of each mode and purpose; each prefixed with the byte that picks
// its part of the target.
#include <fstream>
#include <string>
#include <vector>

#include "core/byte_io.h"
#include "core/trust/frame_seal.h"
#include "core/trust/handshake.h"

namespace {

using namespace deltacast;

void write_seed(const std::string& dir, const std::string& name, uint8_t pick, const std::vector<uint8_t>& bytes) {
  std::ofstream out(dir + "/" + name, std::ios::binary);
  out.put(static_cast<char>(pick));
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> hello_bytes(trust::Protection mode, trust::Purpose purpose) {
  std::vector<uint8_t> bytes(trust::kHelloBytes);
  trust::encode_hello(trust::fresh_hello(mode, purpose).value(), bytes.data());
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string dir = argv[1];
  for (auto mode : {trust::Protection::kInsecure, trust::Protection::kAuthenticated, trust::Protection::kEncrypted}) {
    for (auto purpose : {trust::Purpose::kControl, trust::Purpose::kData, trust::Purpose::kCoordinator}) {
      const std::string name = std::string(trust::protection_name(mode)) + "-" + std::string(trust::purpose_name(purpose));
      write_seed(dir, "hello-" + name, 3, hello_bytes(mode, purpose));
      auto client = hello_bytes(mode, purpose);
      const trust::Share share = trust::KeyShare::fresh().value().share();
      client.insert(client.end(), share.begin(), share.end());
      client.resize(client.size() + trust::kProofBytes, 0);
      write_seed(dir, "client-" + name, 0, client);
    }
  }
  const trust::GroupSecret secret = trust::GroupSecret::from_legacy_token(1);
  for (auto mode : {trust::Protection::kAuthenticated, trust::Protection::kEncrypted}) {
    auto seals = trust::seals_for(trust::derive_keys(secret, trust::fresh_hello(mode, trust::Purpose::kControl).value(),
                                                     trust::fresh_hello(mode, trust::Purpose::kControl).value(), mode).value(),
                                  trust::Role::kClient);
    const std::string text = R"({"type":"done","version":7})";
    std::vector<uint8_t> frame(8 + text.size() + trust::kTagBytes);
    store_le<uint32_t>(frame.data(), 0x31434344);
    store_le<uint32_t>(frame.data() + 4, static_cast<uint32_t>(text.size()));
    std::copy(text.begin(), text.end(), frame.begin() + 8);
    seals.outgoing->seal(frame.data(), 8, frame.data() + 8, text.size(), frame.data() + 8 + text.size());
    write_seed(dir, std::string("frame-") + std::string(trust::protection_name(mode)),
               mode == trust::Protection::kAuthenticated ? 1 : 2, frame);
  }
  return 0;
}
