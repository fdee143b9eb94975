#pragma once
// One function per subcommand (or group), each registering itself on the CLI11 app.
#include <string>

#include <CLI/CLI.hpp>

namespace ejk::app {

// Options every subcommand shares, and the exit code a command sets when it finds what it
// checks for (a regression, a failed verify, a workload that failed).
struct Globals {
  std::string device;     // --device
  std::string cache_dir;  // --cache-dir
  std::string json_path;  // --json FILE
  bool verbose = false, quiet = false;
  int exit_code = 0;
};

void add_devices(CLI::App& app, Globals& g);
void add_kernels(CLI::App& app, Globals& g);
void add_run(CLI::App& app, Globals& g);  // run, replay, record
void add_tune(CLI::App& app, Globals& g);
void add_bundles(CLI::App& app, Globals& g);  // export, import
void add_cache(CLI::App& app, Globals& g);
void add_compare(CLI::App& app, Globals& g);

}  // namespace ejk::app
