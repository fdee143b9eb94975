// grouped_matmul and grouped_matmul_tgmm on Hopper's tensor cores (grouped_matmul.cu, on the
// shared TMA + wgmma GEMM): f16 and bf16 whose rows are 16-byte multiples (TMA moves rows of
// 16-byte units). Other dtypes and devices run the OpenCL C implementation through the cuda
// prelude.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/cuda/cuda_device.hpp"
#include "common/builtin.hpp"
#include "common/gemm_wgmma.hpp"
#include "ejk/error.hpp"
#include "grouped_matmul/grouped_matmul.hpp"
#include "grouped_matmul/space.hpp"

namespace ejk::kernels::grouped_matmul {
namespace {

constexpr const char* source = "grouped_matmul/grouped_matmul.cu";

class WgmmaGroupedMatmul final : public Implementation {
 public:
  explicit WgmmaGroupedMatmul(Mode mode) : kernel_(mode) {}
  std::string_view kernel() const override { return kernel_.name(); }
  Backend backend() const override { return Backend::cuda; }
  // Before the OpenCL C implementation wherever it applies.
  int priority() const override { return 2; }
  std::vector<ArgDef> args() const override { return kernel_.args(); }
  std::vector<std::string> sources() const override { return {source, "common/gemm_wgmma.cuh"}; }

  // wgmma and TMA are sm_90a's alone.
  bool supports(const Invocation& inv, const DeviceInfo& dev) const override {
    const Problem p = Problem::of(inv);
    if (dev.architecture != "sm_90" || (p.dtype != DType::f16 && p.dtype != DType::bf16)) return false;
    if (!dev.offers({16, 8, 16, p.dtype, DType::f32})) return false;
    const std::int64_t out_rows = p.mode == Mode::gmm ? p.m : p.groups * p.k;
    // (tgmm: a grid dimension of groups, at most 65535.)
    return p.k % 8 == 0 && p.n % 8 == 0 && p.groups <= 65535 && std::max({p.m, p.k, p.n, p.groups * p.k * p.n, out_rows * p.n}) < INT_MAX;
  }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    const Problem p = Problem::of(inv);
    // A tile covers a group's rows (grouped_matmul) or k (tgmm) by n.
    ParamSpace s = wgmma_space("tile_rows", "n");
    s.bind(kernel_.vars(inv))
        .bind(device_vars(dev))
        .bind({{"tile_rows", p.mode == Mode::gmm ? std::max<std::int64_t>(1, p.m / p.groups) : p.k}});
    return s;
  }

  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    const Problem p = Problem::of(inv);
    const bool gmm = p.mode == Mode::gmm;
    const std::int64_t rows = gmm ? std::max<std::int64_t>(1, p.m / p.groups) : p.k;
    return wgmma_heuristic(rows, p.n, std::max<std::int64_t>(dev.compute_units, 1), [&](std::int64_t bm, std::int64_t bn) {
      return (gmm ? ceil_div(p.m, bm) : p.groups * ceil_div(p.k, bm)) * ceil_div(p.n, bn);
    });
  }

  void prepare(const Invocation& inv, const Config& config, Device& device) const override {
    const WgmmaTiles t = WgmmaTiles::of(config);
    t.check(where(), config);
    (void)program(Problem::of(inv), t, cuda::cuda_target(device));
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    auto& dev = cuda::cuda_target(device);
    const WgmmaTiles t = WgmmaTiles::of(config);
    t.check(where(), config);
    const bool gmm = p.mode == Mode::gmm;
    if (p.n == 0 || (gmm ? p.m == 0 : p.k == 0)) return;
    auto k = program(p, t, dev);
    // A row-major [rows, cols] operand (of `batch` matrices one after another) in boxes of
    // 64 x box_rows.
    auto map = [&](const Tensor& arg, std::int64_t rows, std::int64_t cols, std::int64_t batch, std::int64_t box_rows) {
      return dev.tensor_map(arg.buffer(), wgmma_operand(rows, cols, batch, 0, box_rows, 2));
    };
    int m = static_cast<int>(p.m), n = static_cast<int>(p.n), kk = static_cast<int>(p.k),
        groups = static_cast<int>(p.groups);
    CUdeviceptr sizes = dev.pointer(args[arg::group_sizes].buffer()), out = dev.pointer(args[arg::out].buffer());
    const auto block = std::array<unsigned, 3>{static_cast<unsigned>(t.threads()), 1, 1};
    const auto shared = static_cast<std::size_t>(t.shared_bytes());
    if (gmm) {
      CUtensorMap lhs = map(args[arg::lhs], p.m, p.k, 1, t.bm);
      CUtensorMap rhs = p.trans_rhs ? map(args[arg::rhs], p.n, p.k, p.groups, t.bn)
                                    : map(args[arg::rhs], p.k, p.n, p.groups, 64);
      void* params[] = {&lhs, &rhs, &sizes, &m, &n, &kk, &groups, &out};
      const auto slots = ceil_div(p.m, t.bm) + p.groups;
      dev.launch_cuda(*k, {static_cast<unsigned>(slots * ceil_div(p.n, t.bn)), 1, 1}, block, shared, params);
    } else {
      CUtensorMap lhs = map(args[arg::lhs], p.m, p.k, 1, 64), grad = map(args[arg::rhs], p.m, p.n, 1, 64);
      void* params[] = {&lhs, &grad, &sizes, &m, &n, &kk, &out};
      dev.launch_cuda(*k, {static_cast<unsigned>(ceil_div(p.k, t.bm) * ceil_div(p.n, t.bn)), 1, static_cast<unsigned>(p.groups)},
                      block, shared, params);
    }
  }

 private:
  std::string where() const { return std::string(kernel_.name()) + " on CUDA (wgmma)"; }

  static std::shared_ptr<cuda::CudaKernel> program(const Problem& p, const WgmmaTiles& t, cuda::CudaTarget& dev) {
    const bool tgmm = p.mode == Mode::tgmm;
    auto options = t.build_options();
    options.insert(options.end(), {"-DTGMM=" + std::to_string(tgmm), "-DTRANS_RHS=" + std::to_string(p.trans_rhs),
                                   "-DBF16=" + std::to_string(p.dtype == DType::bf16)});
    return dev.cuda_kernel(source, options, tgmm ? "ejk_tgmm_wgmma" : "ejk_gmm_wgmma");
  }

  GroupedMatmulKernel kernel_;
};

}  // namespace

EJK_BUILTIN(implementations, "grouped_matmul/cuda") {
  for (Mode mode : {Mode::gmm, Mode::tgmm}) r.add(std::make_shared<WgmmaGroupedMatmul>(mode));
}

}  // namespace ejk::kernels::grouped_matmul
