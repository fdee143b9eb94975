#pragma once
// YAML workload recipes: parsed, validated (errors carry file:line:col and the allowed values)
// and expanded into invocations. The schema and the limits below are documented in
// docs/recipes.md.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ejk/ejk.hpp"

namespace ejk::app {

// Bounds on what a recipe may ask for, so a small file cannot demand unbounded work: checked
// before (size) and while (the rest) the recipe is read, each refusal located.
struct RecipeLimits {
  static constexpr std::size_t max_bytes = std::size_t{1} << 20;  // the file
  static constexpr std::size_t max_nodes = 100000;  // YAML nodes read, an alias counted at every use
  static constexpr int max_depth = 32;               // mappings and lists nested
  static constexpr std::size_t max_workloads = 10000;  // after the sweeps expand
  static constexpr std::size_t max_option_values = 256;  // one workload's options, defaults merged
};

struct Workload {
  std::string kernel;
  std::string where;  // "file:line:col" of the workload, for messages
  DType dtype = DType::f32;
  std::map<std::string, std::int64_t> sizes;  // one point of the sweep
  nlohmann::json options = nlohmann::json::object();
  Invocation invocation;
};

struct TuneSettings {
  std::string strategy = "anneal";  // exhaustive | random | anneal | model
  int evals = 64;                   // budget in evaluations per invocation (0 = the strategy's default)
  double seconds = 0;               // budget in seconds per invocation (0 = unbounded)
  double race = 4;                  // Budget::race_ratio (0 = every variant searched to the end)
  std::uint64_t seed = 1;
  std::vector<std::string> constraints;       // extra constraints added to every space
  std::vector<std::string> constraint_where;  // "file:line:col" of each constraint
};

struct Recipe {
  std::string path;
  std::string name;
  std::string device = "auto";
  std::string device_where;  // "file:line:col" of `device:`, empty when the recipe has none
  std::vector<Workload> workloads;  // the cartesian sweeps expanded
  TuneSettings tune;
};

// Throws InvalidArgument("file:line:col: what (allowed: ...)") for malformed recipes and
// IoError when the file cannot be read.
Recipe load_recipe(const std::string& path);
Recipe parse_recipe(const std::string& text, const std::string& path);

}  // namespace ejk::app
