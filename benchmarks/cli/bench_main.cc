// deltacast-bench: codec, wire and sync benchmarks in one binary.
#include <csignal>

#include <CLI/CLI.hpp>

#include "cli/bench_commands.h"

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);  // a child that died is reported as an error, not by killing the benchmark
  CLI::App app{"deltacast-bench: measure deltacast against baselines taken in the same run"};
  app.require_subcommand(1);
  deltacast::bench::add_codec_command(app);
  deltacast::bench::add_kernels_command(app);
  deltacast::bench::add_wire_command(app);
  deltacast::bench::add_seal_command(app);
  deltacast::bench::add_sync_command(app);
  deltacast::bench::add_rails_command(app);
  deltacast::bench::add_coordinator_command(app);
  deltacast::bench::add_simulate_command(app);
  deltacast::bench::add_soak_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}
