#pragma once
// The autotuner: searches a kernel's parameter space for one invocation on one device,
// timing every candidate on the device's clock and checking its output, and returns every
// measurement with the winner. Also: simulation over stored measurements, batch tuning of a
// recorded trace, and the isolated worker process. docs/tuning.md describes the method.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ejk/config.hpp"
#include "ejk/device.hpp"
#include "ejk/executor.hpp"
#include "ejk/export.hpp"
#include "ejk/invocation.hpp"
#include "ejk/kernel.hpp"
#include "ejk/measurement.hpp"

namespace ejk {

enum class Strategy : std::uint8_t { exhaustive, random, anneal, model };

EJK_API std::string_view to_string(Strategy s);
EJK_API Strategy parse_strategy(std::string_view name);  // throws InvalidArgument listing the names

// When a search stops: at the first limit reached. Zero means no limit of that kind.
struct Budget {
  // Candidates measured, failures included. 0: every candidate for exhaustive, else
  // max(8, 30% of the space).
  int evaluations = 0;
  double seconds = 0;  // wall-clock seconds of the search
  // Stop as soon as a candidate's median is within target_within of target_ns (a time known
  // from an earlier run, or the best of an exhaustive table in simulation).
  double target_ns = 0;
  double target_within = 0.05;
  // Racing variants: when the space has a text parameter "variant", each variant's best guess
  // (its candidate nearest the first start config) is measured first, and a variant whose
  // guess runs this many times slower than the best guess gets no further evaluations.
  // 0: no race.
  double race_ratio = 4.0;
};

struct TimingOptions {
  double warmup_seconds = 0.01;  // run (untimed) at least this long before sampling
  int min_samples = 5;
  int max_samples = 40;
  double max_seconds = 0.25;  // sampling time per candidate, after warm-up
  double max_spread = 0.02;   // stop sampling once IQR / median falls to this
  // A candidate whose first sample is this many times slower than the best median so far,
  // confirmed by a second sample, is abandoned: recorded as ok with n = 2 and a message.
  double abandon_ratio = 4.0;
  // Bytes of distinct memory touched between two runs of a candidate, so that small problems
  // are not timed from cache: the inputs are replicated (up to max_input_sets copies, cycled)
  // and, if that is not enough, a scratch buffer is copied between samples. -1: automatic
  // (64 MiB on the CPU, 128 MiB on other devices); 0: off.
  std::int64_t flush_bytes = -1;
  int max_input_sets = 64;
  int rerank_top = 3;     // best candidates re-run interleaved and paired at the end (0: none)
  int rerank_rounds = 7;  // rounds of the re-run (each runs every candidate once)
};

struct TuneOptions {
  Strategy strategy = Strategy::exhaustive;
  Budget budget;
  std::uint64_t seed = 0;        // search seed; 0: drawn at random (and recorded)
  std::uint64_t input_seed = 0;  // seed of the random inputs; 0: fresh inputs every tune
  TimingOptions timing;
  // Extra constraints (expression text, as in ParamSpace::constraint) narrowing the space,
  // e.g. from a recipe. A config with a parameter a constraint names but lacks passes it.
  std::vector<std::string> constraints;
  bool validate = true;
  // Above this many flops the double-precision reference would be slow: candidates are
  // checked against the heuristic config's output instead.
  double reference_flops_limit = 2e9;
  // Runs candidates in a worker process that is killed when a candidate overruns
  // max(timeout_floor_seconds, timeout_factor x best time) plus warm-up and sampling time,
  // or crashes; the worker is restarted for the next candidate.
  bool isolate = false;
  std::string worker;  // worker executable; empty: find_worker()
  double timeout_floor_seconds = 10;
  double timeout_factor = 20;
  // Host threads that build upcoming candidates' programs (Implementation::prepare) while the
  // device times others, for strategies that know their order (exhaustive, random). -1: up to
  // 8 on a discrete GPU, none elsewhere (building would share the cores a CPU device times on).
  int prebuild_threads = -1;
  // A config measured right after the heuristic's (Executor::warm_start finds one): the search
  // starts from the better of the two. Ignored when it is outside the (constrained) space.
  std::optional<WarmStart> warm_start;
  // Called after each candidate: its measurement, how many were evaluated, the space size.
  std::function<void(const Measurement&, std::size_t evaluated, std::size_t space_size)> progress;
};

struct EJK_API TuneResult {
  Invocation invocation;
  std::string device;  // device id, e.g. "opencl:0"
  // The winner, ready for a cache. When no candidate passed, it holds the heuristic config
  // (and `tuned` is false): never store such an entry.
  CacheEntry entry;
  bool tuned = false;
  std::string strategy;
  std::uint64_t seed = 0;
  std::size_t space_size = 0;
  std::vector<Measurement> measurements;  // every candidate evaluated, in order
  Config heuristic;
  std::optional<Measurement> heuristic_measurement;
  // The interleaved, paired re-run of the best few (and the heuristic): one entry per config.
  std::vector<Measurement> rerank;
  double speedup = 0;     // heuristic time / winner time in the paired re-run; 0 if unknown
  // The warm start given (when it was in the space) and its measurement.
  std::optional<WarmStart> warm_start;
  std::optional<Measurement> warm_measurement;
  double warm_share = 0;  // the share of the gain over the heuristic the warm start gave alone; 0: none
  // Evaluations until the first within 5% (tuning::near_best) of the best measured; 0 when none
  // passed. What a warm start saves shows here.
  std::size_t evaluations_to_near_best = 0;
  std::string validated;  // "reference", "trusted heuristic config" or "off"
  double seconds = 0;     // wall-clock time of the whole tune
  std::string report;     // a few human-readable lines, including why it fell back

  nlohmann::json to_json() const;
  static TuneResult from_json(const nlohmann::json& j);  // throws InvalidArgument
};

// Tunes `inv` with the highest-priority implementation for the device (or the one given).
// Throws InvalidArgument when the invocation itself is invalid; a failing candidate never
// throws, it is recorded.
EJK_API TuneResult tune(const Invocation& inv, Device& device, const TuneOptions& options = {});
EJK_API TuneResult tune(const Invocation& inv, const Implementation& impl, Device& device,
                        const TuneOptions& options = {});

// Times one config as the tuner times a candidate (fresh random inputs, warm-up, rotated
// inputs, samples until the spread is small; samples_ns kept) and, when `check`, validates its
// output first: against the reference up to reference_flops_limit, above it against the
// heuristic config's output. For `ejk run` and benchmarks. Failures are returned, not thrown.
EJK_API Measurement measure(const Invocation& inv, const Config& config, Device& device,
                            const TimingOptions& timing = {}, bool check = true, double reference_flops_limit = 2e9);
// The same for a config chosen on the arguments themselves: `choose` gets the measurement's own
// tensors (inputs made, outputs not yet written), may run on them, and returns the config to
// time. `ejk run` makes its one executor call there, so a workload's inputs are made once.
// What `choose` throws propagates.
EJK_API Measurement measure(const Invocation& inv, const std::function<Config(std::span<const Tensor>)>& choose,
                            Device& device, const TimingOptions& timing = {}, bool check = true,
                            double reference_flops_limit = 2e9);

// ---- simulation: strategies run over stored measurements instead of hardware ----

// config -> measurement, e.g. from an earlier exhaustive run.
class EJK_API MeasurementTable {
 public:
  MeasurementTable() = default;
  explicit MeasurementTable(std::vector<Measurement> rows);
  static MeasurementTable from_result(const TuneResult& result);
  // A TuneResult's JSON (any object with "measurements"), or an array of measurements.
  static MeasurementTable load(const std::string& path);  // throws IoError / InvalidArgument
  static MeasurementTable from_json(const nlohmann::json& j);

  const std::vector<Measurement>& rows() const { return rows_; }
  std::vector<Config> configs() const;
  const Measurement* find(const Config& c) const;
  double best_ns() const;  // smallest median among ok rows; 0 when none
  std::size_t size() const { return rows_.size(); }

 private:
  std::vector<Measurement> rows_;
  std::vector<std::pair<std::string, std::size_t>> index_;  // canonical config -> row, sorted
};

struct SearchResult {
  std::vector<Measurement> evaluated;  // in order
  std::size_t best = static_cast<std::size_t>(-1);  // index into evaluated; -1 when none ok
  std::string stopped;  // why the search ended: "budget: evaluations", "target", "space exhausted", ...
  std::size_t space_size = 0;
  std::string raced;  // the variants the race dropped and why; empty when none
};

// Runs a strategy against the table (every candidate of the space is a row). `start`
// configs are evaluated first. Deterministic for a given seed.
EJK_API SearchResult simulate(const MeasurementTable& table, Strategy strategy, const Budget& budget,
                              std::uint64_t seed, const std::vector<Config>& start = {});

// ---- recording and batch tuning ----

// One line of an EJK_RECORD trace.
struct TraceRecord {
  Invocation invocation;
  std::string device;   // device id; empty when the line has none
  std::string version;  // kernel version when recorded; empty when absent
  std::string tier;     // selection tier when recorded; empty when absent
  int line = 0;         // its line in the file, from 1
};

// Bounds a trace line keeps: it is read no further than max_line_bytes, and its JSON may nest
// no deeper than max_depth.
struct TraceLimits {
  static constexpr std::size_t max_line_bytes = std::size_t{1} << 20;
  static constexpr int max_depth = 32;
};

// Reads a JSONL trace: one object per line with Invocation::from_json's fields (kernel, args,
// options, scalars) and optionally device, version, tier, and the signature, fingerprint and
// origin EJK_RECORD also writes. Every field is checked for its exact type, shapes for the
// bounds of ejk/shape.hpp, and keys for duplicates and unknown names. Throws IoError naming
// path:line and what is wrong, for the first line that breaks any of this.
EJK_API std::vector<TraceRecord> read_trace(const std::string& path);

struct BatchOptions {
  TuneOptions tune;
  std::string device;  // tune every line on this device; empty: each line's own (else $EJK_DEVICE/auto)
  // The persistent cache tuned entries (and all their measurements) are written to, as each
  // is known; default default_cache_path(); an empty path writes nothing.
  std::optional<std::filesystem::path> cache_path;
  // Also called with each result as soon as it is known (progress, reports).
  std::function<void(const TuneResult&)> on_result;
};

// Tunes each distinct invocation of the trace once (same device, kernel and signature: the
// first line wins), in trace order. A line that cannot be tuned here (unknown kernel, invalid
// invocation, absent device) gives a result with tuned == false and the reason in its report;
// it never stops the batch. Results that fell back to the heuristic are not stored.
EJK_API std::vector<TuneResult> tune_trace(const std::string& path, const BatchOptions& options);

// ---- the executor's autotune tier ----

// The options the autotune tier tunes with: strategy model with its default budget unless
// EJK_TUNE_STRATEGY, EJK_TUNE_EVALS, EJK_TUNE_SECONDS, EJK_TUNE_SEED or EJK_TUNE_ISOLATE=1
// say otherwise. Throws InvalidArgument naming a variable whose value does not parse.
EJK_API TuneOptions tune_options_from_env();

// tune() with these options as an executor autotuner: nullopt when no candidate passed.
// The executor installs make_autotuner(tune_options_from_env()) until set_autotuner replaces it.
EJK_API Autotuner make_autotuner(TuneOptions options);
// set_autotuner(make_autotuner(options)).
EJK_API void install_autotuner(TuneOptions options = tune_options_from_env());

// ---- isolation ----

// The worker executable: $EJK_WORKER, else "ejk-worker" next to the running executable,
// else in the install's bin folder. Throws NotFound naming the places it looked.
EJK_API std::string find_worker();

// Serves the worker protocol (JSON lines) on standard input and output until end of input;
// returns the exit status. Any program can be a worker: apps/ejk-worker calls only this, and a
// program with kernels of its own can call it when started with EJK_WORKER_SERVE=1 set (the
// tuner sets it for every worker it starts) and name itself in TuneOptions::worker.
EJK_API int worker_main();

}  // namespace ejk
