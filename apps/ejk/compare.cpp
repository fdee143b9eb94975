#include "compare.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/core.h>

#include "ejk/error.hpp"
#include "ejk/json.hpp"
#include "ejk/text.hpp"

namespace ejk::app {

namespace {

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

void check(const CompareOptions& o) {
  if (!(o.alpha > 0 && o.alpha < 1))
    throw InvalidArgument(fmt::format("--alpha {}: the significance level must lie strictly between 0 and 1 (e.g. 0.01)",
                                      o.alpha));
  if (!(o.min_effect >= 0 && o.min_effect < 1))
    throw InvalidArgument(fmt::format("--min-effect {}: the minimum effect is a fraction of the base median, from 0 up "
                                      "to but not including 1 (0.05 means 5%)",
                                      o.min_effect));
}

const char* verdict_text(Comparison::Verdict v) {
  switch (v) {
    case Comparison::Verdict::slower: return "REGRESSION";
    case Comparison::Verdict::faster: return "faster";
    case Comparison::Verdict::same: return "same";
    case Comparison::Verdict::missing: break;
  }
  return "missing";
}

std::vector<Samples> samples_by_name(const nlohmann::json& doc, std::string_view source) {
  const std::string src = printable(source, 4096);
  if (!doc.is_object()) throw InvalidArgument(src + ": not a benchmark result: expected an object with a \"benchmarks\" list");
  if (!doc.contains("benchmarks"))
    throw InvalidArgument(src + ": not a benchmark result: no \"benchmarks\" list");
  const auto& rows = doc.at("benchmarks");
  if (!rows.is_array())
    throw InvalidArgument(src + ": \"benchmarks\" must be an array, got " + json_kind(rows));
  std::vector<Samples> out;
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    std::string where = src + ": benchmarks[" + std::to_string(i) + "]";
    auto refuse = [&](const std::string& what) { return InvalidArgument(where + ": " + what); };
    if (!row.is_object()) throw refuse("a benchmark row is an object, got " + json_kind(row));
    auto text = [&](const char* key, const char* fallback) -> std::string {
      if (!row.contains(key)) return fallback;
      if (!row.at(key).is_string()) throw refuse(std::string("'") + key + "' must be a string, got " + json_kind(row.at(key)));
      return row.at(key).get<std::string>();
    };
    std::string name = text("run_name", "");
    if (name.empty()) name = text("name", "");
    if (name.empty()) throw refuse("a benchmark row has no name");
    where += " (" + printable(name, 120) + ")";
    if (text("run_type", "iteration") == "aggregate") continue;
    auto [it, fresh] = index.emplace(name, out.size());
    if (fresh) out.push_back({name, {}, {}});
    Samples& s = out[it->second];
    if (row.contains("error_occurred")) {
      if (!row.at("error_occurred").is_boolean())
        throw refuse("'error_occurred' must be true or false, got " + json_kind(row.at("error_occurred")));
      if (row.at("error_occurred").get<bool>()) {
        s.error = text("error_message", "failed");
        continue;
      }
    }
    auto time = [&](const nlohmann::json& v, const std::string& what, double unit) {
      if (!v.is_number()) throw refuse(what + " must be a number, got " + json_kind(v));
      const double t = v.get<double>() * unit;
      if (!(t > 0) || !std::isfinite(t)) throw refuse(what + " must be a positive time, got " + v.dump());
      return t;
    };
    if (row.contains("samples_ns")) {
      const auto& list = row.at("samples_ns");
      if (!list.is_array()) throw refuse("'samples_ns' must be an array of times, got " + json_kind(list));
      for (std::size_t k = 0; k < list.size(); ++k)
        s.ns.push_back(time(list[k], "samples_ns[" + std::to_string(k) + "]", 1));
    } else if (row.contains("real_time")) {
      const std::string unit = text("time_unit", "ns");
      const double scale = unit == "ns" ? 1 : unit == "us" ? 1e3 : unit == "ms" ? 1e6 : unit == "s" ? 1e9 : 0;
      if (scale == 0) throw refuse("unknown time_unit '" + printable(unit, 40) + "' (ns, us, ms or s)");
      s.ns.push_back(time(row.at("real_time"), "'real_time'", scale));
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

CompareResult compare(const nlohmann::json& base, const nlohmann::json& next, const CompareOptions& options,
                      std::string_view base_source, std::string_view next_source) {
  check(options);
  auto base_rows = samples_by_name(base, base_source);
  auto next_rows = samples_by_name(next, next_source);
  if (base_rows.empty()) throw InvalidArgument(printable(base_source, 4096) + ": no benchmark to compare against");
  std::map<std::string, const Samples*> next_index;
  for (const auto& s : next_rows) next_index[s.name] = &s;
  CompareResult result;
  double log_sum = 0;
  int both = 0;
  for (const auto& b : base_rows) {
    const auto& bs = b.ns;
    Comparison c;
    c.name = b.name;
    c.base_n = static_cast<int>(bs.size());
    auto it = next_index.find(b.name);
    if (bs.empty()) {
      // Nothing to hold NEW to: the baseline failed or has no times.
      c.verdict = Comparison::Verdict::missing;
      c.note = b.error.empty() ? "no samples in base" : "failed in base: " + b.error;
      result.rows.push_back(c);
      continue;
    }
    if (it == next_index.end() || it->second->ns.empty()) {
      c.verdict = Comparison::Verdict::missing;
      c.note = it == next_index.end()       ? "missing in new"
               : it->second->error.empty() ? "no samples in new"
                                            : "failed in new: " + it->second->error;
      ++result.missing;
      result.rows.push_back(c);
      continue;
    }
    const auto& ns = it->second->ns;
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
