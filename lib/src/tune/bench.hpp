#pragma once
// Measures candidates of one invocation in this process: random inputs made on the device,
// validation against the reference (or a trusted config's output kept on the device),
// canaries, timing on the device clock.
#include <cstdint>
#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ejk/kernel.hpp"
#include "ejk/measurement.hpp"
#include "ejk/tensor.hpp"
#include "ejk/tuner.hpp"

namespace ejk::tuning {

// What a Bench needs besides the invocation: the part of TuneOptions that travels to a worker.
struct BenchSettings {
  TimingOptions timing;
  bool validate = true;
  double reference_flops_limit = 2e9;
  std::uint64_t input_seed = 1;
  std::optional<Config> trusted;  // checked against on problems above reference_flops_limit
  // The trusted config crashed an earlier worker: take the first clean candidate's output.
  bool trusted_failed = false;

  nlohmann::json to_json() const;
  static BenchSettings from_json(const nlohmann::json& j);
};

nlohmann::json timing_to_json(const TimingOptions& t);
TimingOptions timing_from_json(const nlohmann::json& j);

Measurement failure(const Config& c, Status status, std::string message);
// The measurement for an exception a candidate threw: CompileError -> compile,
// ResourceError -> device_limits, anything else -> runtime.
Measurement classify(const Config& c, const std::exception_ptr& e, std::string_view when);

class Bench {
 public:
  // Allocates the input sets and writes the inputs; the reference (or trusted output) is
  // computed on the first measure().
  Bench(const Invocation& inv, const Implementation& impl, Device& device, BenchSettings settings);
  // The same for a kernel outside the global registry.
  Bench(const Invocation& inv, const Kernel& kernel, const Implementation& impl, Device& device, BenchSettings settings);
  Bench(const Bench&) = delete;
  Bench& operator=(const Bench&) = delete;

  // Computes the reference (or runs the trusted config); measure() does it when not done yet.
  void prepare();
  // Validates, then times. best_ns (0: none yet) drives abandoning slow candidates.
  Measurement measure(const Config& c, double best_ns);
  // Interleaved re-run: `rounds` rounds, each timing every config once (order reversed on odd
  // rounds, so no config always runs right after another). samples[i] holds config i's
  // times; errors[i] is non-empty when it failed.
  void rerank(const std::vector<Config>& configs, int rounds, std::vector<std::vector<double>>& samples,
              std::vector<std::string>& errors);
  // "reference", "trusted config {...}", "first clean candidate {...}" or "off".
  std::string validated() const { return validated_; }
  // The first input set's arguments: the inputs as made; outputs hold anything until a run,
  // and measure() resets them (and restores inout arguments) before its own.
  std::span<const Tensor> arguments() const { return sets_[0].args; }

 private:
  struct Set {
    std::vector<Tensor> args;
  };

  void reset_set0();
  void arm_canaries(const Set& set) const;
  std::string damaged_canary(const Set& set) const;
  std::string modified_input();
  // Bytes of each `in` argument of set 0 read back to see whether a candidate wrote to it (empty
  // for the others), in one read_ranges: all of it up to whole_sample_bytes, else sample_chunks
  // chunks spread from its first byte to its last.
  static constexpr std::size_t whole_sample_bytes = std::size_t{32} << 20, sample_chunks = 64,
                               chunk_bytes = std::size_t{64} << 10;
  std::vector<std::vector<std::byte>> input_samples() const;
  // Set 0's outputs against the expected ones (host reference or device copies), a slice at a
  // time, then against the sampled reference where there is one.
  std::string check_outputs(double& error) const;
  std::string check_sampled(double& error) const;
  // The kernel's sampled reference, read from set 0's inputs (large problems only).
  void take_samples();
  std::string with_samples(std::string what) const;
  // Set 0's outputs become the expected ones, as device copies.
  void keep_outputs();
  void restore(const Set& set);
  double time_once(const Config& c);
  // GPUs lower their clocks when their load is light and raise them only after a stretch of
  // sustained load: NVIDIA's Vulkan driver on an H200 dropped to 345 MHz between a tune's
  // candidates (host-side checks and builds between short timings) and took 0.26-0.31 s of
  // back-to-back runs to return to 1980, so candidates timed as they came ran 5x slower than in
  // use. When the device has been idle longer than spin_idle_seconds since the last timed run
  // (or nothing ran here yet), c runs back to back in windows of spin_window_seconds, for at
  // least spin_min_seconds and then until a window's median is no more than 2% faster than the
  // one before, for at most spin_max_seconds. Devices on the host's CPU (the cpu backend,
  // PoCL, lavapipe) are left alone (nullopt), as is a device that has just run.
  struct SpinUp {
    double first_ns = 0, settled_ns = 0;  // medians of the first and the last window
  };
  std::optional<SpinUp> spin_up(const Config& c);
  static constexpr double spin_idle_seconds = 0.1, spin_window_seconds = 0.05, spin_min_seconds = 0.35,
                          spin_max_seconds = 3.0;

  Invocation inv_;
  const Kernel& kernel_;
  const Implementation& impl_;
  Device& device_;
  BenchSettings settings_;
  std::optional<std::chrono::steady_clock::time_point> last_run_;  // end of the last timed run
  std::vector<Role> roles_;
  std::vector<std::string> names_;
  std::vector<std::size_t> spare_;                 // canary bytes after each argument
  std::vector<std::vector<std::byte>> samples_;    // input_samples() as made
  std::vector<Tensor> pristine_dev_;               // device copies of inout arguments
  std::vector<Tensor> poison_dev_;                 // all-ones bytes for each out argument
  std::vector<Set> sets_;                          // set 0 validates; all are cycled when timing
  std::size_t next_set_ = 0;
  std::vector<Tensor> scratch_;  // copied between samples when the sets alone are too small
  bool prepared_ = false;
  std::vector<std::vector<double>> expected_;  // out/inout values from the reference, in argument order
  std::vector<Tensor> expected_dev_;            // or a trusted run's, kept on the device
  std::vector<SampledOutput> sampled_;          // and, on large problems, the reference at sampled elements
  std::string validated_;
  double tolerance_ = 0;
};

}  // namespace ejk::tuning
