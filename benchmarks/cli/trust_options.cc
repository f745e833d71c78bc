#include "cli/trust_options.h"

#include <stdexcept>

#include "core/trust/handshake.h"

namespace deltacast::bench {

void add_trust_options(CLI::App* command, TrustArgs& args, const std::string& token_default) {
  args.token = token_default;
  command
      ->add_option("--token", args.token,
                   "The group's secret: hex:<64 digits>, file:<path>, env:<NAME>, pass:<text>, or a legacy integer "
                   "token")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](const std::string& text) {
            auto secret = trust::GroupSecret::parse(text);
            return secret.ok() ? std::string() : std::string(secret.status().message());
          },
          "SECRET"));
  auto* protection =
      command
          ->add_option("--protection", args.protection,
                       "What every connection protects: authenticated (tags), encrypted (AES-256-GCM), or insecure "
                       "(no tags; benchmarks only, on every member)")
          ->capture_default_str()
          ->check(CLI::IsMember({"authenticated", "encrypted", "insecure"}));
  command
      ->add_flag_callback(
          "--encrypt", [&args] { args.protection = "encrypted"; }, "Short for --protection encrypted")
      ->excludes(protection);
  command
      ->add_option("--aes-gcm", args.aes_gcm,
                   "The library that seals frames in this process: auto (ipsec-mb where built in and the CPU has "
                   "AES-NI, else openssl), ipsec-mb or openssl; both make the same bytes. Given, it overrides "
                   "DELTACAST_AES_GCM")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](const std::string& text) {
            auto library = trust::parse_aes_gcm_library(text);
            if (!library.ok()) return std::string(library.status().message());
            // Chosen as the option is read: every seal this process makes uses it.
            Status chosen = trust::set_aes_gcm_library(*library);
            return chosen.ok() ? std::string() : std::string(chosen.message());
          },
          "LIBRARY"));
  command
      ->add_option(
          "--rekey-after", args.rekey_after_bytes,
          "Bytes each direction of a connection seals under one key before both ends move to the next, "
          "a power of two like 1m (default 2^38, the protocol's; lower it only to exercise key updates, on every "
          "member: a peer with another mark is refused naming both)")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::Validator(
          [](std::string& bytes) {
            const auto log2 = trust::rekey_mark_log2(std::stoull(bytes));
            return log2.ok() ? std::string() : std::string(log2.status().message());
          },
          "POWER OF TWO"));
}

trust::Trust trust_of(const TrustArgs& args) {
  auto secret = trust::GroupSecret::parse(args.token);
  if (!secret.ok()) throw std::invalid_argument(std::string(secret.status().message()));
  auto mode = trust::parse_protection(args.protection);
  if (!mode.ok()) throw std::invalid_argument(std::string(mode.status().message()));
  trust::Trust trust;
  trust.secret = *secret;
  trust.protection = *mode;
  trust.rekey_after_bytes = args.rekey_after_bytes;
  return trust;
}

}  // namespace deltacast::bench
