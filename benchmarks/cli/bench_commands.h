// Each deltacast-bench mode registers itself as a CLI11 subcommand.
#pragma once

#include <CLI/CLI.hpp>

namespace deltacast::bench {

void add_codec_command(CLI::App& app);
void add_kernels_command(CLI::App& app);
void add_wire_command(CLI::App& app);
void add_seal_command(CLI::App& app);
void add_sync_command(CLI::App& app);
void add_rails_command(CLI::App& app);
void add_coordinator_command(CLI::App& app);
void add_simulate_command(CLI::App& app);
void add_soak_command(CLI::App& app);

}  // namespace deltacast::bench
