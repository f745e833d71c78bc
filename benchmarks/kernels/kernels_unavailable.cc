// deltacast-bench kernels in a build without CUDA: says so and exits 77
// (the code CTest and scripts read as "skipped").
#include <fmt/format.h>

#include "cli/bench_commands.h"

namespace deltacast::bench {

void add_kernels_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("kernels", "GPU diff+encode and decode+apply (needs a CUDA build)");
  cmd->allow_extras();
  cmd->callback([] {
    fmt::print(stderr, "deltacast-bench kernels: this build has no CUDA support (configure with -DDELTACAST_CUDA=ON "
                       "on a machine with nvcc)\n");
    throw CLI::RuntimeError(77);
  });
}

}  // namespace deltacast::bench
