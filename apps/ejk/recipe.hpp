#pragma once
// YAML workload recipes: parsed, validated (errors carry file:line:col and the allowed values)
// and expanded into invocations. The schema is documented in docs/recipes.md.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ejk/ejk.hpp"

namespace ejk::app {

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
  int evals = 64;                   // budget in evaluations per invocation (0 = unbounded)
  double seconds = 0;               // budget in seconds per invocation (0 = unbounded)
  std::uint64_t seed = 1;
  std::vector<std::string> constraints;  // extra constraints added to every space
};

struct Recipe {
  std::string path;
  std::string name;
  std::string device = "auto";
  std::vector<Workload> workloads;  // the cartesian sweeps expanded
  TuneSettings tune;
};

// Throws InvalidArgument("file:line:col: what (allowed: ...)") for malformed recipes and
// IoError when the file cannot be read.
Recipe load_recipe(const std::string& path);
Recipe parse_recipe(const std::string& text, const std::string& path);

}  // namespace ejk::app
