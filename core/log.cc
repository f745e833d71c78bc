#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <memory>
#include <string>

namespace deltacast {

namespace {

std::shared_ptr<spdlog::logger> make_logger() {
  auto logger = spdlog::stderr_color_mt("deltacast");
  logger->set_pattern("[%H:%M:%S.%e] [%n] [%^%l%$] %v");
  const char* env = std::getenv("DELTACAST_LOG");
  logger->set_level(env != nullptr ? spdlog::level::from_str(env) : spdlog::level::warn);
  return logger;
}

}  // namespace

spdlog::logger& log() {
  static std::shared_ptr<spdlog::logger> logger = make_logger();
  return *logger;
}

void set_log_level(std::string_view level) { log().set_level(spdlog::level::from_str(std::string(level))); }

}  // namespace deltacast
