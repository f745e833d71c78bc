#include "sync/gloo_baseline.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace deltacast::bench {


Result<std::unique_ptr<GlooBaseline>> GlooBaseline::start(const Manifest& manifest, int receivers) {
  const std::string script = find_helper_script("gloo_broadcast.py");
  if (script.empty()) return unavailable("gloo_broadcast.py not found next to the executable");
  DC_ASSIGN_OR_RETURN(std::string python, find_python_with("torch.distributed"));
  std::unique_ptr<GlooBaseline> g(new GlooBaseline());
  g->python_ = python;
  const std::string dir = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
  g->shapes_path_ = fmt::format("{}/deltacast-gloo-{}-shapes.json", dir, getpid());
  g->data_path_ = fmt::format("{}/deltacast-gloo-{}.bin", dir, getpid());
  nlohmann::json shapes = nlohmann::json::array();
  for (const auto& t : manifest.tensors()) {
    if (t.dtype != DType::kBF16) return unimplemented("the gloo baseline handles bf16 tensors only");
    shapes.push_back(t.shape);
  }
  if (FILE* f = std::fopen(g->shapes_path_.c_str(), "w")) {
    const std::string text = shapes.dump();
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  } else {
    return io_error("cannot write {}", g->shapes_path_);
  }
  DC_ASSIGN_OR_RETURN(g->helper_, ChildProcess::spawn({python, script, "--receivers", std::to_string(receivers),
                                                       "--shapes", g->shapes_path_, "--data", g->data_path_},
                                                      true));
  DC_ASSIGN_OR_RETURN(std::string ready, g->helper_->read_line(std::chrono::seconds(600)));
  auto parsed = nlohmann::json::parse(ready, nullptr, false);
  if (parsed.is_discarded() || !parsed.value("ready", false)) return unavailable("gloo helper did not start: {}", ready);
  return g;
}

GlooBaseline::~GlooBaseline() {
  if (helper_) {
    (void)helper_->write_line("exit");
    (void)helper_->wait(std::chrono::seconds(30));
    helper_->terminate();
  }
  std::remove(shapes_path_.c_str());
  std::remove(data_path_.c_str());
}

Result<GlooBaseline::Outcome> GlooBaseline::broadcast(std::span<const TensorView> tensors) {
  FILE* f = std::fopen(data_path_.c_str(), "wb");
  if (f == nullptr) return io_error("cannot write {}", data_path_);
  for (const auto& t : tensors) {
    if (t.nbytes() > 0 && std::fwrite(t.data, 1, t.nbytes(), f) != t.nbytes()) {
      std::fclose(f);
      return io_error("short write to {}", data_path_);
    }
  }
  std::fclose(f);
  DC_RETURN_IF_ERROR(helper_->write_line("broadcast"));
  DC_ASSIGN_OR_RETURN(std::string line, helper_->read_line(std::chrono::seconds(1200)));
  auto answer = nlohmann::json::parse(line, nullptr, false);
  if (answer.is_discarded() || !answer.contains("seconds")) return internal_error("gloo helper answered '{}'", line);
  std::remove(data_path_.c_str());  // frees the memory of /dev/shm until the next broadcast
  return Outcome{answer["seconds"].get<double>(), answer.value("exact", false)};
}

}  // namespace deltacast::bench
