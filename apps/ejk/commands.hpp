#pragma once
// One function per subcommand, each registering itself on the CLI11 app.
#include <CLI/CLI.hpp>

namespace ejk::app {

// Options every subcommand shares.
struct Globals {
  std::string device;     // --device
  std::string json_path;  // --json FILE
  bool verbose = false, quiet = false;
};

void add_devices(CLI::App& app, Globals& g);
void add_kernels(CLI::App& app, Globals& g);

}  // namespace ejk::app
