#include "mean_pooling/space.hpp"

#include <algorithm>
#include <string>

#include "ejk/error.hpp"

namespace ejk::kernels::mean_pooling {

ParamSpace device_space(const Invocation& inv, const DeviceInfo& dev) {
  const MeanPoolingKernel k(Problem::of(inv).dir);
  ParamSpace s;
  s.param("threads", {64, 128, 256})
      .param("vec", {1, 2, 4})
      .param("rows", {1, 2, 4, 8})
      .param("splits", {1, 2, 4, 8, 16, 32})
      .constraint("threads <= max_workgroup_size")
      // The reduction space of a group.
      .constraint("threads * vec * 4 <= local_mem")
      // A group much wider than a row only idles.
      .constraint("threads / rows * vec / 2 < dim || (threads == 64 && vec == 1 && rows == 8)")
      // Parts shorter than a group's rows twice over only add merging work.
      .constraint("splits == 1 || splits * rows * 2 <= longest")
      // The parts' f32 sums are indexed with 32-bit integers.
      .constraint("splits == 1 || splits * segs * dim < 2147483648")
      .bind(k.vars(inv))
      .bind(device_vars(dev));
  return s;
}

Config device_heuristic(const Invocation& inv, const DeviceInfo& dev, bool gpu) {
  const Problem p = Problem::of(inv);
  const ParamSpace s = device_space(inv, dev);
  const std::int64_t cus = std::max<std::int64_t>(1, dev.compute_units);
  const std::int64_t want = gpu ? 8 * cus : 2 * cus;
  struct Try {
    std::int64_t threads, vec, rows;
  };
  const std::vector<Try> tries = gpu ? std::vector<Try>{{256, 4, 4}, {256, 2, 4}, {256, 1, 4}, {128, 1, 2}, {64, 1, 8}}
                                     : std::vector<Try>{{64, 4, 1}, {64, 2, 1}, {64, 1, 1}, {64, 1, 8}};
  for (const auto& t : tries) {
    const std::int64_t blocks = ceil_div(p.dim, t.threads / t.rows * t.vec);
    std::int64_t splits = 1;
    while (splits < 32 && p.segs * blocks * splits < want && splits * 2 * std::max<std::int64_t>(64, 2 * t.rows) <= p.longest())
      splits *= 2;
    Config c{{"threads", t.threads}, {"vec", t.vec}, {"rows", t.rows}, {"splits", splits}};
    if (s.admits(c)) return c;
  }
  auto all = s.enumerate();
  if (all.empty()) throw SelectionError(inv.kernel + ": no config fits " + dev.id() + " for " + inv.signature());
  return all.front();
}

void check_config(std::string_view where, const Config& c) {
  const std::int64_t threads = c.get("threads"), vec = c.get("vec"), rows = c.get("rows"), splits = c.get("splits");
  auto pow2 = [](std::int64_t v) { return v > 0 && (v & (v - 1)) == 0; };
  if (!pow2(threads) || !pow2(rows) || rows > threads || vec < 1 || vec > 8 || splits < 1)
    throw InvalidArgument(std::string(where) + ": config " + c.canonical() +
                          " needs powers of two for threads and rows (rows <= threads), vec 1..8 and splits >= 1");
}

}  // namespace ejk::kernels::mean_pooling
