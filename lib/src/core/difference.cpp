#include "core/difference.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "core/element.hpp"
#include "core/parts.hpp"

namespace ejk {

Difference compare_elements(DType t, const std::byte* got, const std::byte* want_raw, const double* want_host, std::int64_t n) {
  Difference v;
  const std::size_t size = dtype_size(t);
  const bool has_want = want_raw || want_host;
  for (std::int64_t j = 0; j < n; ++j) {
    const double g = load_element(t, got + static_cast<std::size_t>(j) * size);
    const double w = want_raw ? load_element(t, want_raw + static_cast<std::size_t>(j) * size) : want_host ? want_host[j] : 0;
    // An infinity is right only where the expected output has the same one (the log-sum-exp of
    // a row with no allowed key is -inf).
    if (!std::isfinite(g) || (has_want && std::isinf(w))) {
      if (has_want && std::isinf(w) && g == w) continue;
      v.bad = j;
      return v;
    }
    if (!has_want) continue;
    v.err = std::max(v.err, std::abs(g - w));
    v.scale = std::max(v.scale, std::abs(w));
  }
  return v;
}

void merge(Difference& total, const Difference& part, std::int64_t first) {
  total.err = std::max(total.err, part.err);
  total.scale = std::max(total.scale, part.scale);
  if (part.bad >= 0 && (total.bad < 0 || first + part.bad < total.bad)) total.bad = first + part.bad;
}

Difference difference_in_slices(Device& device, const Buffer& got, const Buffer* want_raw, const double* want_host, DType t,
                                std::int64_t n) {
  constexpr std::int64_t slice = std::int64_t{1} << 22;
  const std::size_t size = dtype_size(t);
  std::vector<std::byte> g(static_cast<std::size_t>(std::min(slice, n)) * size), w(want_raw ? g.size() : 0);
  Difference total;
  for (std::int64_t first = 0; first < n && total.bad < 0; first += slice) {
    const std::int64_t count = std::min(slice, n - first);
    const std::size_t bytes = static_cast<std::size_t>(count) * size, offset = static_cast<std::size_t>(first) * size;
    device.read(got, offset, g.data(), bytes);
    if (want_raw) device.read(*want_raw, offset, w.data(), bytes);
    std::vector<Difference> parts(host_threads());
    std::vector<std::int64_t> starts(parts.size(), 0);
    for_parts(count, 1, [&](std::int64_t p, std::int64_t lo, std::int64_t hi) {
      starts[static_cast<std::size_t>(p)] = lo;
      parts[static_cast<std::size_t>(p)] =
          compare_elements(t, g.data() + static_cast<std::size_t>(lo) * size,
                           want_raw ? w.data() + static_cast<std::size_t>(lo) * size : nullptr,
                           want_host ? want_host + first + lo : nullptr, hi - lo);
    });
    for (std::size_t p = 0; p < parts.size(); ++p) merge(total, parts[p], first + starts[p]);
  }
  return total;
}

Difference fold_groups(std::span<const std::uint32_t> words, std::int64_t n) {
  Difference d;
  for (std::size_t g = 0; g + 3 < words.size(); g += 4) {
    d.err = std::max<double>(d.err, std::bit_cast<float>(words[g]));
    d.scale = std::max<double>(d.scale, std::bit_cast<float>(words[g + 1]));
    const auto bad = static_cast<std::int64_t>(words[g + 2] | (static_cast<std::uint64_t>(words[g + 3]) << 32));
    if (bad < n && (d.bad < 0 || bad < d.bad)) d.bad = bad;
  }
  return d;
}

Difference Device::difference(const Buffer& got, const Buffer* want, DType t, std::int64_t n) {
  return difference_in_slices(*this, got, want, nullptr, t, n);
}

}  // namespace ejk
