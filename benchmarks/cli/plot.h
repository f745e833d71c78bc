// Pictures of the benchmarks' reports: a report is handed to a matplotlib script installed next to
// deltacast-bench (plot_<command>.py), which draws it into a PNG.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace deltacast::bench {

// Runs `script` (found next to the executable) on `report`, drawing `png`. The report is written
// beside the PNG for the script and removed once it drew; left there when it failed.
Status draw_plot(const std::string& script, const nlohmann::json& report, const std::string& png);

}  // namespace deltacast::bench
