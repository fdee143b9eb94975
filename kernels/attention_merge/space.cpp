#include "attention_merge/space.hpp"

#include <algorithm>
#include <string>

#include "ejk/error.hpp"

namespace ejk::kernels::attention_merge {

ParamSpace device_space(const Invocation& inv, const DeviceInfo& dev) {
  const AttentionMergeKernel k;
  ParamSpace s;
  s.param("threads", {64, 128, 256})
      .param("vec", {1, 2, 4})
      .constraint("threads <= max_workgroup_size")
      // A vector never straddles two rows, and stays aligned to its width.
      .constraint("head_dim % vec == 0")
      // Each row's two weights, for up to threads * vec rows.
      .constraint("threads * vec * 8 <= local_mem")
      .bind(k.vars(inv))
      .bind(device_vars(dev));
  return s;
}

Config device_heuristic(const Invocation& inv, const DeviceInfo& dev, bool gpu) {
  const Problem p = Problem::of(inv);
  const ParamSpace s = device_space(inv, dev);
  const std::int64_t D = std::max<std::int64_t>(1, p.head_dim);
  const std::int64_t vec = D % 4 == 0 ? 4 : D % 2 == 0 ? 2 : 1;
  const std::int64_t cus = std::max<std::int64_t>(1, dev.compute_units);
  // The share of a group's work-item slots that hold an element, over the loop a group runs.
  auto used = [&](std::int64_t threads) {
    const std::int64_t step = threads * vec;
    if (D <= step) return static_cast<double>(rows_per_group(threads, vec, D) * D) / static_cast<double>(step);
    return static_cast<double>(D) / static_cast<double>(ceil_div(D, step) * step);
  };
  Config best;
  double best_used = -1;
  for (std::int64_t threads : {256, 128, 64}) {
    const Config c{{"threads", threads}, {"vec", vec}};
    if (!s.admits(c)) continue;
    // A larger group is worth it only while there are groups for every compute unit (a few per
    // unit on GPUs, two per core on CPU-hosted drivers).
    const std::int64_t groups = ceil_div(p.rows(), rows_per_group(threads, vec, D));
    const bool few = threads > 64 && groups < (gpu ? 4 : 2) * cus;
    const double u = used(threads) - (few ? 0.5 : 0.0);
    if (u > best_used + 1e-9) best = c, best_used = u;
  }
  if (best_used >= 0) return best;
  auto all = s.enumerate();
  if (all.empty()) throw SelectionError(inv.kernel + ": no config fits " + dev.id() + " for " + inv.signature());
  return all.front();
}

void check_config(std::string_view where, const Config& c, const Problem& p) {
  const std::int64_t threads = c.get("threads"), vec = c.get("vec");
  if (threads < 1 || threads > 1024 || (vec != 1 && vec != 2 && vec != 4) || (p.head_dim % vec) != 0)
    throw InvalidArgument(std::string(where) + ": config " + c.canonical() + " needs threads 1..1024 and vec 1, 2 or 4 dividing head_dim " +
                          std::to_string(p.head_dim));
}

}  // namespace ejk::kernels::attention_merge
