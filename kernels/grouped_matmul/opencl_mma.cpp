// grouped_matmul and grouped_matmul_tgmm on NVIDIA tensor cores through OpenCL
// (grouped_matmul_mma.cl, the matmul tile of common/clc_gemm_mma.h): f16 and bf16 with k and n
// multiples of 8 (cp.async moves 16-byte rows, and every group's first row stays 16-byte
// aligned), on OpenCL devices that list m16n8k16 fragments of their type (NVIDIA from sm_80).
// Registered above the scalar tiles of grouped_matmul.cl, which keep every other case; the CUDA
// backend has its own (cuda.cpp).
#include <algorithm>
#include <climits>
#include <memory>
#include <string>

#include "backends/clc/clc_device.hpp"
#include "common/builtin.hpp"
#include "common/ceil_div.hpp"
#include "common/gemm_mma.hpp"
#include "ejk/error.hpp"
#include "grouped_matmul/grouped_matmul.hpp"

namespace ejk::kernels::grouped_matmul {
namespace {

constexpr const char* slots_key = "grouped_matmul/grouped_matmul_slots.h";
constexpr const char* source_key = "grouped_matmul/grouped_matmul_mma.cl";

class OpenCLGroupedMatmulMma final : public clc::Implementation {
 public:
  OpenCLGroupedMatmulMma(Backend backend, Mode mode) : clc::Implementation(backend), kernel_(mode) {}
  std::string_view kernel() const override { return kernel_.name(); }
  int priority() const override { return 1; }
  std::vector<ArgDef> args() const override { return kernel_.args(); }
  std::vector<std::string> sources() const override { return {source_key, slots_key, mma_tile_source, clc::mma_source, clc::prelude_source}; }

  bool supports(const Invocation& inv, const DeviceInfo& dev) const override {
    const Problem p = Problem::of(inv);
    return backend() == Backend::opencl && (p.dtype == DType::f16 || p.dtype == DType::bf16) &&
           dev.offers({16, 8, 16, p.dtype, DType::f32}) && p.k % 8 == 0 && p.n % 8 == 0 &&
           std::max({p.m, p.n, p.k}) < INT_MAX;
  }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    const Problem p = Problem::of(inv);
    const bool gmm = p.mode == Mode::gmm;
    ParamSpace s = mma_tile_space("tile_rows", "n");
    // grouped_matmul tiles a group's rows (A as stored); tgmm tiles k, reading a group's rows of
    // lhs as the transposed operand.
    s.bind(kernel_.vars(inv))
        .bind(device_vars(dev))
        .bind({{"tile_rows", gmm ? std::max<std::int64_t>(1, p.m / p.groups) : p.k},
               {"trans_a", std::int64_t{!gmm}},
               {"trans_b", std::int64_t{gmm && p.trans_rhs}}});
    return s;
  }

  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    const Problem p = Problem::of(inv);
    return mma_tile_heuristic(space(inv, dev), {}, std::max<std::int64_t>(dev.compute_units, 1),
                              [&](std::int64_t bm, std::int64_t bn) {
                                return p.mode == Mode::gmm ? ceil_div(p.m, bm) * ceil_div(p.n, bn)
                                                           : p.groups * ceil_div(p.k, bm) * ceil_div(p.n, bn);
                              },
                              /*tall=*/true);
  }

  void prepare(const Invocation& inv, const Config& config, Device& device) const override {
    const Problem p = Problem::of(inv);
    if (p.n == 0 || (p.mode == Mode::gmm ? p.m == 0 : p.k == 0)) return;
    auto& dev = clc::clc_device(device);
    (void)program(p, MmaTiles::of(config), config, dev);
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    const bool gmm = p.mode == Mode::gmm;
    if (p.n == 0 || (gmm ? p.m == 0 : p.k == 0)) return;
    auto& dev = clc::clc_device(device);
    const MmaTiles g = MmaTiles::of(config);
    auto k = program(p, g, config, dev);
    const auto threads = static_cast<std::size_t>(g.threads());
    const auto col_tiles = static_cast<std::size_t>(ceil_div(p.n, g.bn));
    const int m = static_cast<int>(p.m), n = static_cast<int>(p.n), kk = static_cast<int>(p.k),
              groups = static_cast<int>(p.groups);
    const clc::Range local(threads, 1, 1);
    if (gmm) {
      const auto slots = static_cast<std::size_t>(ceil_div(p.m, g.bm) + p.groups);
      dev.launch(*k, clc::Range(col_tiles * threads, slots, 1), local, args[arg::lhs], args[arg::rhs],
                 args[arg::group_sizes], args[arg::out], m, n, kk, groups);
    } else {
      const auto row_tiles = static_cast<std::size_t>(ceil_div(p.k, g.bm));
      dev.launch(*k, clc::Range(col_tiles * threads, row_tiles, static_cast<std::size_t>(p.groups)), local,
                 args[arg::lhs], args[arg::rhs], args[arg::group_sizes], args[arg::out], m, n, kk, groups);
    }
  }

 private:
  std::shared_ptr<clc::Kernel> program(const Problem& p, const MmaTiles& g, const Config& config, clc::Device& dev) const {
    const bool gmm = p.mode == Mode::gmm, trans_a = !gmm, trans_b = gmm && p.trans_rhs;
    g.check(std::string(kernel()) + " on OpenCL tensor cores", config, trans_a, trans_b, dev.info());
    return dev.kernel(source_key, g.build_options(trans_a, trans_b, p.dtype == DType::bf16), gmm ? "gmm" : "tgmm");
  }

  GroupedMatmulKernel kernel_;
};

}  // namespace

EJK_BUILTIN(implementations, "grouped_matmul/opencl_mma") {
  for (Mode mode : {Mode::gmm, Mode::tgmm}) clc::add<OpenCLGroupedMatmulMma>(r, mode);
}

}  // namespace ejk::kernels::grouped_matmul
