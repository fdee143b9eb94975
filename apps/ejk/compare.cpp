#include "compare.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "ejk/error.hpp"

namespace ejk::app {

namespace {

double time_unit_ns(const std::string& unit) {
  if (unit == "ns") return 1;
  if (unit == "us") return 1e3;
  if (unit == "ms") return 1e6;
  if (unit == "s") return 1e9;
  throw InvalidArgument("unknown time_unit '" + unit + "'");
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

std::vector<std::pair<std::string, std::vector<double>>> samples_by_name(const nlohmann::json& doc) {
  if (!doc.is_object() || !doc.contains("benchmarks") || !doc["benchmarks"].is_array())
    throw InvalidArgument("not a benchmark result: expected an object with a \"benchmarks\" list");
  std::vector<std::pair<std::string, std::vector<double>>> out;
  std::map<std::string, std::size_t> index;
  for (const auto& row : doc["benchmarks"]) {
    if (row.value("run_type", "iteration") == "aggregate") continue;
    std::string name = row.value("run_name", row.value("name", ""));
    if (name.empty()) throw InvalidArgument("a benchmark row has no name");
    auto [it, fresh] = index.emplace(name, out.size());
    if (fresh) out.emplace_back(name, std::vector<double>{});
    auto& samples = out[it->second].second;
    if (row.contains("samples_ns")) {
      for (const auto& s : row["samples_ns"]) samples.push_back(s.get<double>());
    } else if (row.contains("real_time")) {
      samples.push_back(row["real_time"].get<double>() * time_unit_ns(row.value("time_unit", "ns")));
    }
  }
  return out;
}

double mann_whitney_p(const std::vector<double>& a, const std::vector<double>& b) {
  const std::size_t n1 = a.size(), n2 = b.size();
  if (n1 == 0 || n2 == 0) return 1.0;
  std::vector<std::pair<double, int>> all;
  for (double x : a) all.emplace_back(x, 0);
  for (double x : b) all.emplace_back(x, 1);
  std::sort(all.begin(), all.end());
  // Average ranks over ties; the tie term corrects the variance.
  double rank_sum_a = 0, tie_term = 0;
  for (std::size_t i = 0; i < all.size();) {
    std::size_t j = i;
    while (j < all.size() && all[j].first == all[i].first) ++j;
    const double avg_rank = 0.5 * static_cast<double>(i + 1 + j);
    const double t = static_cast<double>(j - i);
    tie_term += t * t * t - t;
    for (std::size_t k = i; k < j; ++k)
      if (all[k].second == 0) rank_sum_a += avg_rank;
    i = j;
  }
  const double N1 = static_cast<double>(n1), N2 = static_cast<double>(n2), N = N1 + N2;
  const double u = rank_sum_a - N1 * (N1 + 1) / 2;
  const double mean = N1 * N2 / 2;
  const double var = N1 * N2 / 12 * ((N + 1) - tie_term / (N * (N - 1)));
  if (var <= 0) return 1.0;
  const double z = (std::abs(u - mean) - 0.5) / std::sqrt(var);  // continuity correction
  return std::min(1.0, std::erfc(std::max(z, 0.0) / std::sqrt(2.0)));
}

CompareResult compare(const nlohmann::json& base, const nlohmann::json& next, const CompareOptions& options) {
  auto base_rows = samples_by_name(base);
  auto next_rows = samples_by_name(next);
  std::map<std::string, const std::vector<double>*> next_index;
  for (const auto& [name, s] : next_rows) next_index[name] = &s;
  CompareResult result;
  double log_sum = 0;
  int both = 0;
  for (const auto& [name, bs] : base_rows) {
    Comparison c;
    c.name = name;
    c.base_n = static_cast<int>(bs.size());
    auto it = next_index.find(name);
    if (it == next_index.end() || bs.empty() || it->second->empty()) {
      c.verdict = Comparison::Verdict::missing;
      result.rows.push_back(c);
      continue;
    }
    const auto& ns = *it->second;
    c.new_n = static_cast<int>(ns.size());
    c.base_ns = median_of(bs);
    c.new_ns = median_of(ns);
    c.change = c.new_ns / c.base_ns - 1;
    c.p_value = mann_whitney_p(bs, ns);
    if (c.p_value < options.alpha && c.change > options.min_effect) c.verdict = Comparison::Verdict::slower;
    else if (c.p_value < options.alpha && c.change < -options.min_effect) c.verdict = Comparison::Verdict::faster;
    if (c.verdict == Comparison::Verdict::slower) ++result.regressions;
    log_sum += std::log(c.new_ns / c.base_ns);
    ++both;
    result.rows.push_back(c);
  }
  result.geomean_change = both ? std::exp(log_sum / both) - 1 : 0;
  return result;
}

}  // namespace ejk::app
