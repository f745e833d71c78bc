// The options every deltacast-bench role takes for the group's trust: --token, the group's
// secret in any form trust::GroupSecret::parse reads (hex:, file:, env:, pass:, or a legacy
// integer token), and --protection (authenticated, encrypted, insecure; --encrypt is short for
// --protection encrypted). Both are refused with the reason when the command line is parsed, so
// a role never starts with an unusable one.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "core/trust/trust.h"

namespace deltacast::bench {

struct TrustArgs {
  std::string token = "0";
  std::string protection = "authenticated";
  // The same options for a child process.
  std::vector<std::string> command_line() const { return {"--token", token, "--protection", protection}; }
};

void add_trust_options(CLI::App* command, TrustArgs& args, const std::string& token_default);
// The trust of arguments the options accepted.
trust::Trust trust_of(const TrustArgs& args);

}  // namespace deltacast::bench
