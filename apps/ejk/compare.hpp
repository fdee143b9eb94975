#pragma once
// `ejk compare`: decides whether a run regressed against a baseline. A benchmark regresses
// when its samples are slower with statistical significance (two-sided Mann-Whitney U test)
// and by at least a minimum effect (median ratio); both are needed, so noise alone never fails.
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace ejk::app {

struct CompareOptions {
  double alpha = 0.01;       // significance level, 0 < alpha < 1
  double min_effect = 0.05;  // relative slowdown of the median that counts, a fraction: 0 <= e < 1
};

// Throws InvalidArgument naming the option for values outside those ranges (NaN included).
void check(const CompareOptions& options);

struct Comparison {
  std::string name;
  double base_ns = 0, new_ns = 0;  // medians
  double change = 0;               // new / base - 1
  double p_value = 1;
  int base_n = 0, new_n = 0;
  enum class Verdict { same, faster, slower, missing } verdict = Verdict::same;
  std::string note;  // why it is missing: absent from NEW, or failed there
};

// What `compare` prints for a verdict: "REGRESSION", "faster", "same", or "missing".
const char* verdict_text(Comparison::Verdict v);

struct CompareResult {
  std::vector<Comparison> rows;
  double geomean_change = 0;  // geometric mean of new/base over rows present in both, minus 1
  int regressions = 0;
  int missing = 0;  // benchmarks of BASE with no samples in NEW
};

struct Samples {
  std::string name;
  std::vector<double> ns;
  std::string error;  // the benchmark's error_message when it failed (error_occurred)
};

// Samples per benchmark name from Google Benchmark-shaped JSON: each row's "samples_ns" when
// present (ejk writes them), else every repetition row's real_time (plain Google Benchmark).
// Rows with error_occurred give no samples. Throws InvalidArgument "<source>: benchmarks[i]
// (name): ..." for anything of the wrong type, and for times that are not positive.
std::vector<Samples> samples_by_name(const nlohmann::json& doc, std::string_view source = "input");

// Two-sided p-value of the Mann-Whitney U test (normal approximation with tie correction).
double mann_whitney_p(const std::vector<double>& a, const std::vector<double>& b);

// Throws InvalidArgument for invalid options, for either document as samples_by_name does, and
// when BASE has no benchmark.
CompareResult compare(const nlohmann::json& base, const nlohmann::json& next, const CompareOptions& options,
                      std::string_view base_source = "BASE", std::string_view next_source = "NEW");

}  // namespace ejk::app
