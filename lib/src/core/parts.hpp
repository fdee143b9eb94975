#pragma once
// Splitting host work over the machine's cores: fills and output checks walk millions of
// elements per slice, and every core shortens that.
#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace ejk {

// The host threads such work uses: every core, at most 16.
inline unsigned host_threads() { return std::max(1u, std::min(16u, std::thread::hardware_concurrency())); }

// Calls fn(part, lo, hi) for consecutive ranges covering [0, n), one per thread and at most
// host_threads() of them, each a multiple of `align` elements except the last; the calling
// thread takes part 0. Returns when every call has.
template <class Fn>
void for_parts(std::int64_t n, std::int64_t align, Fn&& fn) {
  const auto threads = static_cast<std::int64_t>(host_threads());
  const std::int64_t part = std::max<std::int64_t>(align, (n / threads + align) / align * align);
  std::vector<std::jthread> pool;
  for (std::int64_t lo = part, p = 1; lo < n; lo += part, ++p)
    pool.emplace_back([&fn, p, lo, hi = std::min(n, lo + part)] { fn(p, lo, hi); });
  if (n > 0) fn(0, 0, std::min(n, part));
}

}  // namespace ejk
