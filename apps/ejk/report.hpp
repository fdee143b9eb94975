#pragma once
// What run, tune and replay print: a table for people, Google Benchmark-shaped JSON for tools,
// and a progress bar on a terminal.
#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ejk/ejk.hpp"
#include "ejk/tuner.hpp"

namespace ejk::app {

struct Row {
  std::string name;  // unique per workload: kernel/sizes/dtype
  std::string kernel;
  Stats stats;  // of the selected (run) or tuned (tune) config
  std::vector<double> samples_ns;
  double flops = 0, bytes = 0;
  std::string config;  // canonical JSON
  std::string tier;    // selection tier, or "tuned" / "heuristic" for tune
  std::string reason;
  std::string status = "ok";  // or a failure category
  std::string note;           // why it failed or fell back
  // Tuning only:
  double heuristic_ns = 0, speedup = 0;
  int evaluations = 0, failures = 0;
  std::size_t space = 0;
  double seconds = 0;
};

// "matmul/m:64/n:256/k:256/f32" from a recipe's sizes, or from the shapes of a trace's arguments.
std::string workload_name(const Invocation& inv, const std::map<std::string, std::int64_t>& sizes = {});

void print_table(const std::vector<Row>& rows, bool tuning);
nlohmann::json benchmark_json(const DeviceInfo& device, const std::vector<Row>& rows);

class Progress {
 public:
  Progress(std::size_t total, bool enabled);  // drawn only when enabled and stderr is a terminal
  ~Progress();
  void step(const std::string& label);  // before the item starts
  void finish();

 private:
  void draw() const;
  std::size_t total_, done_ = 0;
  bool on_;
  std::string label_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace ejk::app
