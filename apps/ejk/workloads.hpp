#pragma once
// The invocations a command works on, from a recipe (.yaml/.yml) or a recorded trace (.jsonl).
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "ejk/ejk.hpp"
#include "ejk/tuner.hpp"
#include "report.hpp"
#include "recipe.hpp"

namespace ejk::app {

struct Item {
  std::string name;
  Invocation invocation;
  std::string device;  // resolved device name
};

struct Workset {
  std::string source;
  std::vector<Item> items;
  std::optional<TuneSettings> tune;  // from a recipe
};

bool is_trace(const std::string& path);
// Device precedence: --device, then the recipe's or trace line's, then $EJK_DEVICE, then auto.
Workset load_workset(const std::string& path, const Globals& g);

// Timing used by run and replay: a shorter budget than tuning, enough for a stable median.
TimingOptions run_timing();

}  // namespace ejk::app
