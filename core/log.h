// deltacast's logger: one spdlog logger named "deltacast" writing to stderr.
// The level comes from the DELTACAST_LOG environment variable
// (trace, debug, info, warn, error, off; default warn) or set_log_level().
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace deltacast {

spdlog::logger& log();
void set_log_level(std::string_view level);

}  // namespace deltacast
