#pragma once
// `ejk compare`: decides whether a run regressed against a baseline. A benchmark regresses
// when its samples are slower with statistical significance (two-sided Mann-Whitney U test)
// and by at least a minimum effect (median ratio); both are needed, so noise alone never fails.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ejk::app {

struct CompareOptions {
  double alpha = 0.01;       // significance level
  double min_effect = 0.05;  // relative slowdown of the median that counts
};

struct Comparison {
  std::string name;
  double base_ns = 0, new_ns = 0;  // medians
  double change = 0;               // new / base - 1
  double p_value = 1;
  int base_n = 0, new_n = 0;
  enum class Verdict { same, faster, slower, missing } verdict = Verdict::same;
};

struct CompareResult {
  std::vector<Comparison> rows;
  double geomean_change = 0;  // geometric mean of new/base over rows present in both, minus 1
  int regressions = 0;
};

// Samples per benchmark name from Google Benchmark-shaped JSON: each row's "samples_ns" when
// present (ejk writes them), else every repetition row's real_time (plain Google Benchmark).
std::vector<std::pair<std::string, std::vector<double>>> samples_by_name(const nlohmann::json& doc);

// Two-sided p-value of the Mann-Whitney U test (normal approximation with tie correction).
double mann_whitney_p(const std::vector<double>& a, const std::vector<double>& b);

CompareResult compare(const nlohmann::json& base, const nlohmann::json& next, const CompareOptions& options);

}  // namespace ejk::app
