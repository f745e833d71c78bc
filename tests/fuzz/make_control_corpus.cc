// Writes one valid control message of every type into a directory, for the
// control fuzzer to start from.
#include <cstdio>
#include <string>

#include "support/control_examples.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  int n = 0;
  for (const auto& message : deltacast::testing::every_control_message()) {
    const std::string path = std::string(argv[1]) + "/message-" + std::to_string(n++) + ".json";
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) return 1;
    const std::string text = deltacast::control::encode_text(message);
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
  return 0;
}
