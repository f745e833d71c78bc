// The --token option every deltacast-bench role takes: the group's secret in any form
// trust::GroupSecret::parse reads (hex:, file:, env:, pass:, or a legacy integer token), refused
// with the reason when the command line is parsed, so a role never starts with an unusable one.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "core/trust/trust.h"

namespace deltacast::bench {

CLI::Option* add_secret_option(CLI::App* command, std::string& spec, const std::string& description);
// The trust of a spec the option accepted.
trust::Trust trust_of(const std::string& spec);

}  // namespace deltacast::bench
