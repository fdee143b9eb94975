#pragma once
// What run, tune and replay print: a table for people, Google Benchmark-shaped JSON for tools,
// and a progress bar on a terminal.
#include <chrono>
#include <cstdio>
#include <optional>
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
  int near_best_at = 0;    // evaluations until the first within 5% of the best
  std::string warm_start;  // the config the search also started from, and its source
  double warm_share = 0;   // its share of the tune's gain over the heuristic (0: none or unknown)
  std::size_t space = 0;
  double seconds = 0;
  std::vector<Measurement> candidates;  // every candidate measured, the heuristic's included
  std::optional<Config> heuristic;
  // Against the device's measured ceilings; absent when it has none (ejk devices --measure).
  std::optional<Roofline> roofline;
  // ejk run --passes: one more run of the selected config, launch by launch (Device::time_passes).
  std::vector<PassTime> passes;
};

// The device's ceilings from the persistent cache `ex` reads; nullopt when none were measured
// (or the cache is off).
std::optional<Ceilings> stored_ceilings(Executor& ex);
// Sets row.roofline from the row's time, work and dtype when `c` is there.
void apply_roofline(Row& row, const std::optional<Ceilings>& c, DType t);

// "matmul/m:64/n:256/k:256/f32" from a recipe's sizes, or from the shapes of a trace's arguments.
std::string workload_name(const Invocation& inv, const std::map<std::string, std::int64_t>& sizes = {});

// `ceilings`: the device's, written to the context block when given.
nlohmann::json benchmark_json(const DeviceInfo& device, const std::vector<Row>& rows, const Ceilings* ceilings = nullptr);

// "150.97 TFLOP/s", "812.3 GB/s": a rate per second in the prefix that reads well; "-" for none.
std::string human_rate(double per_second, const char* unit);

// A progress line on a terminal's stderr: the workload, its part (a tuning candidate i/N) and
// an ETA. Whatever else goes to the terminal goes through `above`, so the line never tears it.
class Progress {
 public:
  Progress(std::size_t total, bool enabled);  // drawn only when enabled and stderr is a terminal
  ~Progress();
  void step(const std::string& label);  // before the item starts
  void detail(const std::string& text);  // within the item, e.g. "candidate 3/32"
  template <class F>
  void above(F&& print) {
    clear();
    print();
    std::fflush(stdout);
    if (on_) draw();
  }
  void finish();

 private:
  void draw() const;
  void clear() const;
  std::size_t total_, done_ = 0;
  bool on_;
  std::string label_, detail_;
  std::chrono::steady_clock::time_point start_;
};

// The results of run, replay and tune as they come: each row printed when its workload is done
// (under the progress line), and the --json file rewritten so that it holds every finished row,
// also when the command is interrupted.
class Report {
 public:
  // `names`: every workload's name, for the table's width. `ceilings`: the first device's
  // measured ceilings; with them the table has a roofline column and the JSON a ceilings block.
  Report(const std::vector<std::string>& names, bool tuning, bool print, std::string json_path, Progress& progress,
         std::optional<Ceilings> ceilings = std::nullopt);
  void add(Row row, const DeviceInfo* device);
  // Writes the JSON file a last time.
  void finish();

 private:
  void write_json();
  bool tuning_, print_;
  std::size_t width_ = 8;
  std::string json_path_;
  Progress& progress_;
  std::vector<Row> rows_;
  std::optional<Ceilings> ceilings_;
  const DeviceInfo* device_ = nullptr;
  std::chrono::steady_clock::time_point written_{};
  bool dirty_ = false;
};

// Ctrl-C (SIGINT) or SIGTERM while alive: the command finishes the workload it is on, reports
// what it has and exits with 130; a second signal stops it at once.
class Interruptible {
 public:
  Interruptible();
  ~Interruptible();
  static bool requested();
};

}  // namespace ejk::app
