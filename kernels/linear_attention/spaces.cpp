#include "linear_attention/spaces.hpp"

#include <string>
#include <vector>

#include "ejk/error.hpp"

namespace ejk::kernels::linear_attention {

ParamSpace device_space(Variant v, bool backward, const Invocation& inv, const DeviceInfo& dev) {
  ParamSpace s;
  s.param("block_v", {8, 16, 32, 64})
      // A slice wider than the widest value dimension only repeats the one below.
      .constraint("block_v == 8 || block_v / 2 < max_dim");
  if (v == Variant::recurrent) {
    s.param("k_split", {1, 2, 4, 8})
        .constraint("block_v * k_split <= max_workgroup_size")
        .constraint("k_split == 1 || k_split / 2 < max_dim")
        // The state's rows of one work-item stay in registers.
        .constraint("(max_dim + k_split - 1) / k_split <= 64");
  } else {
    s.param("chunk", {8, 16, 32, 64})
        .param("threads", {64, 128, 256})
        .constraint("chunk == 8 || chunk / 2 < seq")
        .constraint("threads <= max_workgroup_size")
        // More work-items than (token, column) outputs of a chunk only idle.
        .constraint("threads == 64 || threads <= chunk * block_v")
        // Queries, keys (channel-major) and their cumulative row gates, values and their column
        // gates, the scores and the state slice (rows padded by one word), in f32.
        .constraint("(chunk * (max_dim + 1) + max_dim * (chunk + 1) * (1 + row_gates)"
                    " + chunk * (block_v + 1) * (1 + col_gates) + chunk * (chunk + 1) + max_dim * (block_v + 1)"
                    " + 2 * chunk) * 4 <= local_mem");
  }
  // Whether a pass has per-channel row / column gates (the backward's passes swap gk and gv).
  const Problem p = Problem::of(inv);
  const bool any = p.has_gk || p.has_gv;
  s.bind(LinearAttentionKernel(v, backward).vars(inv))
      .bind(device_vars(dev))
      .bind({{"row_gates", std::int64_t{p.backward ? any : p.has_gk}}, {"col_gates", std::int64_t{p.backward ? any : p.has_gv}}});
  return s;
}

// GPUs: groups of 128-256 work-items, the longest chunk local memory allows. CPU drivers: one
// 64-item group per slice (PoCL runs a group on one core), wide slices.
Config device_heuristic(Variant v, bool backward, const Invocation& inv, const DeviceInfo& dev, bool gpu) {
  const ParamSpace s = device_space(v, backward, inv, dev);
  std::vector<Config> tries;
  if (v == Variant::recurrent) {
    const std::vector<std::pair<int, int>> gpu_tries{{32, 4}, {32, 2}, {16, 8}, {16, 4}, {32, 1}, {16, 2}, {16, 1}};
    const std::vector<std::pair<int, int>> cpu_tries{{64, 1}, {64, 2}, {32, 2}, {32, 4}, {16, 4}, {16, 8}, {16, 1}};
    for (auto [bv, ks] : gpu ? gpu_tries : cpu_tries)
      tries.push_back(Config{{"block_v", std::int64_t{bv}}, {"k_split", std::int64_t{ks}}});
  } else {
    struct T {
      int chunk, bv, threads;
    };
    const std::vector<T> gpu_tries{{64, 32, 256}, {32, 32, 256}, {32, 16, 128}, {16, 32, 128},
                                   {16, 16, 128}, {16, 16, 64}, {8, 16, 64}};
    const std::vector<T> cpu_tries{{32, 64, 64}, {32, 32, 64}, {16, 32, 64}, {16, 16, 64}, {8, 16, 64}};
    for (const T& t : gpu ? gpu_tries : cpu_tries)
      tries.push_back(Config{{"block_v", std::int64_t{t.bv}}, {"chunk", std::int64_t{t.chunk}}, {"threads", std::int64_t{t.threads}}});
  }
  for (const Config& c : tries)
    if (s.admits(c)) return c;
  auto all = s.enumerate();
  if (all.empty())
    throw SelectionError(std::string(kernel_name(v, backward)) + ": no config fits " + dev.id() + " for " + inv.signature());
  return all.front();
}

Tiles tiles_of(Variant v, const Config& config) {
  Tiles t;
  t.block_v = config.get("block_v");
  auto pow2 = [](std::int64_t x) { return x > 0 && (x & (x - 1)) == 0; };
  bool ok = pow2(t.block_v);
  if (v == Variant::recurrent) {
    t.k_split = config.get("k_split");
    ok = ok && pow2(t.k_split);
  } else {
    t.chunk = config.get("chunk");
    t.group = config.get("threads");
    ok = ok && pow2(t.chunk) && pow2(t.group);
  }
  if (!ok)
    throw InvalidArgument(std::string(kernel_name(v, false)) + ": config " + config.canonical() +
                          " needs powers of two for its sizes");
  return t;
}

}  // namespace ejk::kernels::linear_attention
