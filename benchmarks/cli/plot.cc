#include "cli/plot.h"

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <fstream>

#include "cli/child_process.h"

namespace deltacast::bench {

Status draw_plot(const std::string& script, const nlohmann::json& report, const std::string& png) {
  const std::string path = find_helper_script(script);
  if (path.empty()) return unavailable("{} not found next to the executable", script);
  const std::string data = png + ".json";
  {
    std::ofstream out(data);
    out << report.dump();
    if (!out) return io_error("could not write {}", data);
  }
  DC_ASSIGN_OR_RETURN(const std::string python, find_python_with("matplotlib"));
  DC_ASSIGN_OR_RETURN(auto child, ChildProcess::spawn({python, path, data, png}, false));
  DC_ASSIGN_OR_RETURN(const int status, child->wait(std::chrono::seconds(120)));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return internal_error("{} failed (is python3-matplotlib installed?); its data is in {}", script, data);
  }
  std::remove(data.c_str());
  return Status();
}

}  // namespace deltacast::bench
