#include "cli/secret_option.h"

#include <stdexcept>

namespace deltacast::bench {

CLI::Option* add_secret_option(CLI::App* command, std::string& spec, const std::string& description) {
  return command->add_option("--token", spec, description)
      ->capture_default_str()
      ->check(CLI::Validator(
          [](const std::string& text) {
            auto secret = trust::GroupSecret::parse(text);
            return secret.ok() ? std::string() : std::string(secret.status().message());
          },
          "SECRET"));
}

trust::Trust trust_of(const std::string& spec) {
  auto secret = trust::GroupSecret::parse(spec);
  if (!secret.ok()) throw std::invalid_argument(std::string(secret.status().message()));
  trust::Trust trust;
  trust.secret = *secret;
  return trust;
}

}  // namespace deltacast::bench
