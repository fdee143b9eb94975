#include "common/sampled.hpp"

#include <algorithm>

namespace ejk::kernels {

void for_each_row(const ArgReader& read, std::size_t arg, std::int64_t base, std::int64_t row_len, std::int64_t count,
                  const std::function<void(std::int64_t, const double*)>& fn) {
  const std::int64_t step = std::max<std::int64_t>(1, (std::int64_t{1} << 20) / std::max<std::int64_t>(row_len, 1));
  for (std::int64_t r0 = 0; r0 < count; r0 += step) {
    const std::int64_t n = std::min(step, count - r0);
    const std::vector<double> rows = read(arg, base + r0 * row_len, n * row_len);
    for (std::int64_t r = 0; r < n; ++r) fn(r0 + r, rows.data() + r * row_len);
  }
}

std::vector<double> row_slices(const ArgReader& read, std::size_t arg, std::int64_t base, std::int64_t row_len,
                               std::int64_t count, std::int64_t offset, std::int64_t width) {
  std::vector<double> out(static_cast<std::size_t>(count * width));
  for_each_row(read, arg, base, row_len, count,
               [&](std::int64_t r, const double* row) { std::copy_n(row + offset, width, out.begin() + r * width); });
  return out;
}

ArgReader host_reader(const HostArrays& args) {
  return [&args](std::size_t arg, std::int64_t first, std::int64_t count) {
    const std::vector<double>& a = args[arg];
    return std::vector<double>(a.begin() + first, a.begin() + first + count);
  };
}

std::vector<SampledOutput> sampled_outputs(std::vector<std::pair<std::size_t, SampledPairs>> outs) {
  std::vector<SampledOutput> result;
  for (auto& [arg, values] : outs) {
    std::sort(values.begin(), values.end());
    SampledOutput s{arg, {}, {}};
    for (const auto& [at, value] : values) {
      s.index.push_back(at);
      s.value.push_back(value);
    }
    if (!s.index.empty()) result.push_back(std::move(s));
  }
  return result;
}

}  // namespace ejk::kernels
