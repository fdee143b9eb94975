#pragma once
// One function per subcommand (or group), each registering itself on the CLI11 app.
#include <cstdint>
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

// A number from the command line, read exactly: the whole text, within [min, max], else
// InvalidArgument naming the option and the range (CLI11 alone takes -5 where the code then
// falls back to a default, and nan or inf for a double).
std::int64_t integer_option(const std::string& option, const std::string& text, std::int64_t min, std::int64_t max);
double number_option(const std::string& option, const std::string& text, double min, double max);

void add_devices(CLI::App& app, Globals& g);
void add_kernels(CLI::App& app, Globals& g);
void add_run(CLI::App& app, Globals& g);  // run, replay, record
void add_tune(CLI::App& app, Globals& g);
void add_bundles(CLI::App& app, Globals& g);  // export, import
void add_cache(CLI::App& app, Globals& g);
void add_compare(CLI::App& app, Globals& g);
void add_report(CLI::App& app, Globals& g);

}  // namespace ejk::app
