// The options every deltacast-bench role takes for the group's trust: --token, the group's
// secret in any form trust::GroupSecret::parse reads (hex:, file:, env:, pass:, or a legacy
// integer token), and --protection (authenticated, encrypted, insecure; --encrypt is short for
// --protection encrypted), and --aes-gcm, the library that computes the frames' AES-256-GCM for
// this process (core/trust/aes_gcm.h; the bytes are the same with either), and --rekey-after, the
// bytes a connection's direction seals under one key (a protocol constant, lowered to exercise key
// updates; every member of a run must use the same). All are refused with
// the reason when the command line is parsed, so a role never starts with an unusable one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/trust/aes_gcm.h"
#include "core/trust/trust.h"

namespace deltacast::bench {

struct TrustArgs {
  std::string token = "0";
  std::string protection = "authenticated";
  std::string aes_gcm = "auto";
  uint64_t rekey_after_bytes = trust::kRekeyAfterBytes;
  // The same options for a child process, with the AES-GCM library this process runs.
  std::vector<std::string> command_line() const {
    return {"--token", token, "--protection", protection, "--aes-gcm", std::string(trust::aes_gcm_library_name()),
            "--rekey-after", std::to_string(rekey_after_bytes)};
  }
};

void add_trust_options(CLI::App* command, TrustArgs& args, const std::string& token_default);
// The trust of arguments the options accepted.
trust::Trust trust_of(const TrustArgs& args);

}  // namespace deltacast::bench
