#pragma once
// Helpers for the decode attention tests: random inputs, shuffled block tables, and checking a
// kernel's output tensor against its double-precision reference.
#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "support.hpp"

namespace ejk::test {

inline std::vector<double> uniform_values(std::mt19937_64& rng, std::int64_t n, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& x : v) {
    do x = d(rng);
    while (x == 0.0);
  }
  return v;
}

// Block tables [seqs, max_blocks] of distinct pages in a random order.
inline std::vector<double> shuffled_pages(std::mt19937_64& rng, std::int64_t seqs, std::int64_t max_blocks,
                                          std::int64_t num_blocks) {
  std::vector<double> pages(static_cast<std::size_t>(num_blocks));
  std::iota(pages.begin(), pages.end(), 0.0);
  std::shuffle(pages.begin(), pages.end(), rng);
  std::vector<double> t(static_cast<std::size_t>(seqs * max_blocks));
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = pages[i % pages.size()];
  return t;
}

struct Compared {
  double error = 0, tolerance = 0;
  std::vector<double> got;
};

// Reads every argument back (outputs after the run), and compares the output at `out` with the
// kernel's reference.
inline Compared compare(const Kernel& kernel, const Invocation& inv, std::span<const Tensor> args, std::size_t out,
                        const std::vector<double>& initial_out) {
  HostArrays host;
  for (const auto& t : args) host.push_back(t.read());
  Compared c;
  c.got = host[out];
  host[out] = initial_out;
  const HostArrays want = kernel.reference(inv, host);
  c.error = relative_error(c.got, want[0]);
  c.tolerance = kernel.tolerance(inv);
  return c;
}

// The configs of the implementation selected for `inv` on `ctx`'s device whose parameter `name`
// is `value`: one pass of a kernel's space.
inline std::vector<Config> configs_where(Context& ctx, const Invocation& inv, std::string_view name, std::int64_t value) {
  const auto& impl = Registry::global().implementation(inv, ctx.device().info());
  std::vector<Config> out;
  for (const Config& c : impl.space(inv, ctx.device().info()).enumerate())
    if (c.get(name, -1) == value) out.push_back(c);
  return out;
}

// Every config of the Vulkan decode engine's tensor-core pass (stream 2) on each case in f16
// against the reference (`run(c, config)`), and the heuristic taking it for each case's
// invocation (`invocation(c)`); false, with nothing run, where the device does not offer it.
template <class Case, class Inv, class Run>
bool cooperative_pass_matches(Context& ctx, const std::vector<Case>& cases, Inv invocation, Run run);

// The first n elements of a row-major array as a string, for failure messages.
inline std::string head(const std::vector<double>& v, std::size_t n = 6) {
  std::string s;
  for (std::size_t i = 0; i < v.size() && i < n; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}

template <class Case, class Inv, class Run>
bool cooperative_pass_matches(Context& ctx, const std::vector<Case>& cases, Inv invocation, Run run) {
  for (const Case& c : cases) {
    const Invocation inv = invocation(c);
    const auto configs = configs_where(ctx, inv, "stream", 2);
    if (configs.empty()) return false;
    const auto& impl = Registry::global().implementation(inv, ctx.device().info());
    EXPECT_EQ(impl.heuristic(inv, ctx.device().info()).get("stream"), 2) << c.name;
    for (const Config& cfg : configs) {
      const Compared r = run(c, cfg);
      EXPECT_LE(r.error, r.tolerance) << c.name << " " << cfg.canonical() << ": " << head(r.got);
    }
  }
  return true;
}

}  // namespace ejk::test
