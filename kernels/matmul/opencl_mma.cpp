// matmul on NVIDIA tensor cores through OpenCL (matmul_mma.cl): f16 and bf16 operands whose rows
// are 16-byte multiples, on OpenCL devices that list m16n8k16 fragments of their type (NVIDIA from
// sm_80). Registered above the xgemm of matmul.cl, which keeps every other case. The CUDA backend
// has native kernels of its own for the same operands (cuda.cpp), so this one is OpenCL's alone.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/clc/clc_device.hpp"
#include "common/builtin.hpp"
#include "common/ceil_div.hpp"
#include "common/gemm_mma.hpp"
#include "ejk/error.hpp"
#include "matmul/matmul.hpp"

namespace ejk::kernels::matmul {
namespace {

constexpr const char* source_key = "matmul/matmul_mma.cl";
constexpr const char* where = "matmul on OpenCL tensor cores";

bool offered(const Problem& p, const DeviceInfo& dev) {
  if (p.dtype != DType::f16 && p.dtype != DType::bf16) return false;
  return dev.offers({16, 8, 16, p.dtype, DType::f32}) && p.rows_in_multiples_of(8) && std::max({p.m, p.n, p.k}) < INT_MAX;
}

class OpenCLMatmulMma final : public clc::Implementation {
 public:
  using clc::Implementation::Implementation;
  std::string_view kernel() const override { return "matmul"; }
  int priority() const override { return 1; }
  std::vector<ArgDef> args() const override { return matmul_args(); }
  std::vector<std::string> sources() const override { return {source_key, mma_tile_source, clc::mma_source, clc::prelude_source}; }

  bool supports(const Invocation& inv, const DeviceInfo& dev) const override {
    return backend() == Backend::opencl && offered(Problem::of(inv), dev);
  }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    ParamSpace s = mma_tile_space("m", "n");
    s.param("group_m", {1, 8}).bind(MatmulKernel().vars(inv)).bind(device_vars(dev));
    return s;
  }

  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    const Problem p = Problem::of(inv);
    return mma_tile_heuristic(space(inv, dev), Config{{"group_m", 8}}, std::max<std::int64_t>(dev.compute_units, 1),
                              [&](std::int64_t bm, std::int64_t bn) { return p.batch * ceil_div(p.m, bm) * ceil_div(p.n, bn); });
  }

  void prepare(const Invocation& inv, const Config& config, Device& device) const override {
    const Problem p = Problem::of(inv);
    if (p.m == 0 || p.n == 0 || p.batch == 0) return;
    auto& dev = clc::clc_device(device);
    const MmaTiles g = MmaTiles::of(config);
    g.check(where, config, p.trans_a, p.trans_b, dev.info());
    (void)program(p, g, config.get("group_m"), dev);
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    if (p.m == 0 || p.n == 0 || p.batch == 0) return;
    auto& dev = clc::clc_device(device);
    const MmaTiles g = MmaTiles::of(config);
    g.check(where, config, p.trans_a, p.trans_b, dev.info());
    const std::int64_t lda = p.trans_a ? p.m : p.k, ldb = p.trans_b ? p.k : p.n, ldc = p.n;
    auto k = program(p, g, config.get("group_m"), dev);
    const std::int64_t tiles = ceil_div(p.m, g.bm) * ceil_div(p.n, g.bn);
    const clc::Range global(static_cast<std::size_t>(tiles * g.threads()), static_cast<std::size_t>(p.batch), 1);
    const clc::Range local(static_cast<std::size_t>(g.threads()), 1, 1);
    dev.launch(*k, global, local, static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(p.k),
               static_cast<float>(p.alpha), static_cast<float>(p.beta), args[0], static_cast<int>(lda),
               static_cast<std::int64_t>(p.batch_stride_a), args[1], static_cast<int>(ldb),
               static_cast<std::int64_t>(p.batch_stride_b), args[2], static_cast<int>(ldc),
               static_cast<std::int64_t>(p.batch_stride_c));
  }

 private:
  static std::shared_ptr<clc::Kernel> program(const Problem& p, const MmaTiles& g, std::int64_t group_m,
                                              clc::Device& dev) {
    if (group_m < 1) throw InvalidArgument(std::string(where) + ": group_m must be at least 1, got " + std::to_string(group_m));
    return dev.kernel(source_key, g.build_options(p.trans_a, p.trans_b, p.dtype == DType::bf16) + " -DGROUP_M=" + std::to_string(group_m),
                      "gemm_mma");
  }
};

}  // namespace

EJK_BUILTIN(implementations, "matmul/opencl_mma") { clc::add<OpenCLMatmulMma>(r); }

}  // namespace ejk::kernels::matmul
