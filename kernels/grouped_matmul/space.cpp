#include "grouped_matmul/space.hpp"

#include <algorithm>
#include <string>

#include "ejk/error.hpp"

namespace ejk::kernels::grouped_matmul {

ParamSpace device_space(const Invocation& inv, const DeviceInfo& dev, const Vars& extra) {
  const Problem p = Problem::of(inv);
  const GroupedMatmulKernel k(p.mode);
  const bool gmm = p.mode == Mode::gmm;
  ParamSpace s;
  s.param("tile_m", {16, 32, 64, 128})
      .param("tile_n", {16, 32, 64, 128})
      .param("tile_k", {8, 16, 32})
      .param("wpt_m", {1, 2, 4, 8})
      .param("wpt_n", {1, 2, 4, 8})
      .constraint("tile_m % wpt_m == 0 && tile_n % wpt_n == 0")
      .constraint("(tile_m / wpt_m) * (tile_n / wpt_n) >= 32")
      .constraint("(tile_m / wpt_m) * (tile_n / wpt_n) <= max_workgroup_size")
      // Near-square register blocks: the fewest local reads per multiply-add.
      .constraint("wpt_m == wpt_n || wpt_m == 2 * wpt_n || wpt_n == 2 * wpt_m")
      // Staged tiles (rows padded by a word) in local memory.
      .constraint("tile_k * (tile_m + tile_n + 2) * 4 <= local_mem")
      // Tiles more than twice the rows of a group (tile_rows), the columns or the depth only idle.
      .constraint("tile_m == 16 || tile_m / 2 < tile_rows")
      .constraint("tile_n == 16 || tile_n / 2 < n")
      .constraint("tile_k == 8 || tile_k / 2 < depth")
      .bind(k.vars(inv))
      .bind(device_vars(dev))
      // grouped_matmul tiles a group's rows and reduces over k; tgmm tiles k and reduces over a
      // group's rows.
      .bind({{"tile_rows", gmm ? std::max<std::int64_t>(1, p.m / p.groups) : p.k},
             {"depth", gmm ? p.k : std::max<std::int64_t>(1, p.m / p.groups)}});
  if (!extra.empty()) s.bind(extra);
  return s;
}

Config device_heuristic(const Invocation& inv, const DeviceInfo& dev, bool gpu, const Vars& extra) {
  const Problem p = Problem::of(inv);
  const ParamSpace s = device_space(inv, dev, extra);
  const std::int64_t rows = p.mode == Mode::gmm ? p.m / p.groups : p.k;
  struct Try {
    std::int64_t tm, tn, tk, wm, wn;
  };
  std::vector<Try> tries;
  if (gpu) {
    if (rows >= 128) tries.push_back({128, 128, 16, 8, 8});
    tries.insert(tries.end(), {{64, 128, 16, 4, 8}, {64, 64, 16, 4, 4}, {32, 64, 16, 2, 4}, {32, 32, 16, 2, 2}});
  } else {
    // Wide register blocks: a random tune on PoCL (m 1024, k 512, n 384, 8 groups, bf16) found
    // 128 x 128 tiles of 8 x 8, 32 deep, 3.6x faster than 32 x 32 tiles of 4 x 4.
    tries = {{128, 128, 32, 8, 8}, {64, 64, 32, 8, 8}, {32, 64, 16, 4, 8}, {32, 32, 16, 4, 4}, {16, 16, 16, 2, 2},
             {16, 16, 8, 2, 2}};
  }
  const std::int64_t cus = std::max<std::int64_t>(1, dev.compute_units);
  const Config* fallback = nullptr;
  std::vector<Config> configs;
  for (const auto& t : tries)
    configs.push_back({{"tile_m", t.tm}, {"tile_n", t.tn}, {"tile_k", t.tk}, {"wpt_m", t.wm}, {"wpt_n", t.wn}});
  for (std::size_t i = 0; i < configs.size(); ++i) {
    if (!s.admits(configs[i])) continue;
    const auto& t = tries[i];
    const std::int64_t tiles = p.mode == Mode::gmm ? (ceil_div(p.m, t.tm) + p.groups) * ceil_div(p.n, t.tn)
                                                   : ceil_div(p.k, t.tm) * ceil_div(p.n, t.tn) * p.groups;
    if (tiles >= 2 * cus) return configs[i];
    fallback = &configs[i];  // the smallest admitted tile so far
  }
  if (fallback) return *fallback;
  auto all = s.enumerate();
  if (all.empty()) throw SelectionError(inv.kernel + ": no config fits " + dev.id() + " for " + inv.signature());
  return all.front();
}

void check_config(std::string_view where, const Config& c) {
  const std::int64_t tm = c.get("tile_m"), tn = c.get("tile_n"), tk = c.get("tile_k"), wm = c.get("wpt_m"),
                     wn = c.get("wpt_n");
  if (tm <= 0 || tn <= 0 || tk <= 0 || wm <= 0 || wn <= 0 || tm % wm || tn % wn || wm * wn > 64)
    throw InvalidArgument(std::string(where) + ": config " + c.canonical() +
                          " needs positive tiles divided by wpt_m and wpt_n, at most 64 outputs per work-item");
}

}  // namespace ejk::kernels::grouped_matmul
