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
  std::string where;   // where the invocation came from: "file:line:col" (recipe), "file:line" (trace)
};

struct Workset {
  std::string source;
  std::vector<Item> items;
  std::optional<TuneSettings> tune;  // from a recipe

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& item : items) out.push_back(item.name);
    return out;
  }
};

// Runs `check`, prefixing any error it throws with `where` and keeping the error's kind, so the
// exit code stays the one docs/cli.md gives it.
template <typename F>
void at_place(const std::string& where, F&& check) {
  try {
    check();
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(where + ": " + e.what());
  } catch (const NotFound& e) {
    throw NotFound(where + ": " + e.what());
  } catch (const SelectionError& e) {
    throw SelectionError(where + ": " + e.what());
  } catch (const DeviceError& e) {
    throw DeviceError(where + ": " + e.what());
  }
}

bool is_trace(const std::string& path);
// Device precedence: --device, then the recipe's or trace line's, then $EJK_DEVICE, then auto.
// Everything is checked before anything runs, each refusal naming its place: every invocation
// by its kernel, every device by opening it, and every workload against its device's buffers
// and memory and the host's memory (which holds each argument as doubles).
Workset load_workset(const std::string& path, const Globals& g);

// Timing used by run and replay: a shorter budget than tuning, enough for a stable median.
TimingOptions run_timing();

}  // namespace ejk::app
