#include "core/difference.hpp"

#include <algorithm>
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

Difference Device::difference(const Buffer& got, const Buffer* want, DType t, std::int64_t n) {
  // Raw bytes a slice at a time, compared on every core: host memory stays bounded whatever
  // the arrays' size.
  constexpr std::int64_t slice = std::int64_t{1} << 22;
  const std::size_t size = dtype_size(t);
  std::vector<std::byte> g(static_cast<std::size_t>(std::min(slice, n)) * size), w(want ? g.size() : 0);
  Difference total;
  for (std::int64_t first = 0; first < n && total.bad < 0; first += slice) {
    const std::int64_t count = std::min(slice, n - first);
    const std::size_t bytes = static_cast<std::size_t>(count) * size, offset = static_cast<std::size_t>(first) * size;
    read(got, offset, g.data(), bytes);
    if (want) read(*want, offset, w.data(), bytes);
    std::vector<Difference> parts(host_threads());
    std::vector<std::int64_t> starts(parts.size(), 0);
    for_parts(count, 1, [&](std::int64_t p, std::int64_t lo, std::int64_t hi) {
      starts[static_cast<std::size_t>(p)] = lo;
      parts[static_cast<std::size_t>(p)] = compare_elements(t, g.data() + static_cast<std::size_t>(lo) * size,
                                                            want ? w.data() + static_cast<std::size_t>(lo) * size : nullptr,
                                                            nullptr, hi - lo);
    });
    for (std::size_t p = 0; p < parts.size(); ++p) merge(total, parts[p], first + starts[p]);
  }
  return total;
}

}  // namespace ejk
