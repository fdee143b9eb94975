#include "tune/stats.hpp"

#include <algorithm>

namespace ejk::tuning {

namespace {
// Quantile q of sorted values, interpolating between neighbours (type 7, as R and NumPy).
double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  double pos = q * static_cast<double>(sorted.size() - 1);
  auto lo = static_cast<std::size_t>(pos);
  std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  double frac = pos - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}
}  // namespace

Stats summarize(std::span<const double> samples_ns) {
  std::vector<double> v(samples_ns.begin(), samples_ns.end());
  std::sort(v.begin(), v.end());
  Stats s;
  s.n = static_cast<int>(v.size());
  if (v.empty()) return s;
  s.median_ns = quantile(v, 0.5);
  s.iqr_ns = quantile(v, 0.75) - quantile(v, 0.25);
  s.min_ns = v.front();
  return s;
}

double spread(const Stats& s) { return s.median_ns > 0 ? s.iqr_ns / s.median_ns : 0; }

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return quantile(values, 0.5);
}

}  // namespace ejk::tuning
