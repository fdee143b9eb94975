// matmul on the native CPU backend: the packed native GEMM (per-ISA builds), or OpenBLAS
// as an alternative algorithm the tuner may pick for f32.
#include <cstring>
#include <memory>
#include <vector>

#ifdef EJK_HAVE_OPENBLAS
#include <cblas.h>
#endif

#include "backends/cpu/cpu_device.hpp"
#include "common/builtin.hpp"
#include "ejk/error.hpp"
#include "matmul/cpu_gemm_native.hpp"
#include "matmul/matmul.hpp"

namespace ejk::kernels::matmul {
namespace {

int lanes() { return cpu::native_lanes(); }

class CpuMatmul final : public Implementation {
 public:
  std::string_view kernel() const override { return "matmul"; }
  Backend backend() const override { return Backend::cpu; }
  std::vector<ArgDef> args() const override { return matmul_args(); }
  std::vector<std::string> sources() const override { return {}; }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    Problem p = Problem::of(inv);
    std::vector<Value> algos{std::string("native")};
#ifdef EJK_HAVE_OPENBLAS
    if (p.dtype == DType::f32) algos.push_back(std::string("openblas"));
#endif
    ParamSpace s;
    s.param("algo", algos)
        .param("mr", {4, 6, 8, 12, 14}, "algo == \"native\"")
        .param("nv", {1, 2, 3}, "algo == \"native\"")
        .param("mc", {48, 96, 192, 384}, "algo == \"native\"")
        .param("kc", {128, 256, 384, 512}, "algo == \"native\"")
        .param("nc", {512, 2048, 8192}, "algo == \"native\"")
        // Accumulators plus B vectors must fit the 32 vector registers.
        .constraint("mr * nv + nv + 1 <= 32")
        .constraint("nv == 1 || mr <= 8")
        .constraint("nv < 3 || mr <= 6")
        .constraint("mc % mr == 0")
        // The packed A block and B panel should stay within the L2 cache.
        .constraint("(mc + nv * lanes) * kc * 4 <= 2 * local_mem")
        .bind(MatmulKernel().vars(inv))
        .bind(device_vars(dev))
        .bind({{"lanes", std::int64_t{lanes()}}});
    return s;
  }

  Config heuristic(const Invocation& /*inv*/, const DeviceInfo& /*dev*/) const override {
    // AVX-512: the blocking with the best geometric mean over the exhaustive tables of
    // bench/results/tune/ (256^3 to 1024^3 and 64x1024x1024), 1.13x their best on average
    // where the previous mr 12 / nv 1 was 1.5x.
    if (lanes() == cpu::avx512_lanes)
      return {{"algo", std::string("native")}, {"mr", 6}, {"nv", 3}, {"mc", 48}, {"kc", 512}, {"nc", 2048}};
    return {{"algo", std::string("native")}, {"mr", 6}, {"nv", 2}, {"mc", 96}, {"kc", 256}, {"nc", 2048}};
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    Problem p = Problem::of(inv);
    auto& dev = ejk::cpu::cpu_device(device);
    const auto& a = ejk::cpu::cpu_buffer(args[0].buffer());
    const auto& b = ejk::cpu::cpu_buffer(args[1].buffer());
    const auto& c = ejk::cpu::cpu_buffer(args[2].buffer());
    const std::size_t esize = dtype_size(p.dtype);
    const std::int64_t mn = p.m * p.n;

#ifdef EJK_HAVE_OPENBLAS
    if (config.text("algo") == "openblas") {
      for (std::int64_t bi = 0; bi < p.batch; ++bi)
        cblas_sgemm(CblasRowMajor, p.trans_a ? CblasTrans : CblasNoTrans, p.trans_b ? CblasTrans : CblasNoTrans,
                    static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(p.k), static_cast<float>(p.alpha),
                    a.as<float>() + bi * p.batch_stride_a, static_cast<int>(p.trans_a ? p.m : p.k),
                    b.as<float>() + bi * p.batch_stride_b, static_cast<int>(p.trans_b ? p.k : p.n),
                    static_cast<float>(p.beta), c.as<float>() + bi * p.batch_stride_c, static_cast<int>(p.n));
      return;
    }
#endif
    if (config.text("algo") != "native") throw InvalidArgument("matmul cpu: unknown algo " + config.text("algo"));
    cpu::Blocking blk{static_cast<int>(config.get("mc")), static_cast<int>(config.get("kc")),
                      static_cast<int>(config.get("nc")), static_cast<int>(config.get("mr")),
                      static_cast<int>(config.get("nv"))};
    // The native kernel accumulates into f32 C; f16/bf16 results go through an f32 copy.
    std::vector<float> widened;
    for (std::int64_t bi = 0; bi < p.batch; ++bi) {
      float* cf;
      if (p.dtype == DType::f32) {
        cf = c.as<float>() + bi * p.batch_stride_c;
      } else {
        widened.assign(static_cast<std::size_t>(mn), 0.f);
        cf = widened.data();
        if (p.beta != 0.0) {
          auto src = std::span(static_cast<const std::byte*>(c.data()) + bi * p.batch_stride_c * esize, mn * esize);
          auto vals = decode(p.dtype, src);
          for (std::int64_t i = 0; i < mn; ++i) widened[i] = static_cast<float>(vals[i]);
        }
      }
      const float beta = static_cast<float>(p.beta);
      if (beta == 0.f) std::fill(cf, cf + mn, 0.f);
      else if (beta != 1.f)
        for (std::int64_t i = 0; i < mn; ++i) cf[i] *= beta;
      cpu::Operands op{p.m,
                       p.n,
                       p.k,
                       static_cast<const std::byte*>(a.data()) + bi * p.batch_stride_a * esize,
                       p.trans_a ? 1 : p.k,
                       p.trans_a ? p.m : 1,
                       static_cast<const std::byte*>(b.data()) + bi * p.batch_stride_b * esize,
                       p.trans_b ? 1 : p.n,
                       p.trans_b ? p.k : 1,
                       cf,
                       p.n,
                       static_cast<float>(p.alpha),
                       p.dtype};
      cpu::gemm_native(op, blk, dev.pool());
      if (p.dtype != DType::f32) {
        std::vector<double> vals(widened.begin(), widened.end());
        auto bytes = encode(p.dtype, vals);
        std::memcpy(static_cast<std::byte*>(c.data()) + bi * p.batch_stride_c * esize, bytes.data(), bytes.size());
      }
    }
  }
};

}  // namespace

EJK_BUILTIN(implementations, "matmul/cpu") { r.add(std::make_shared<CpuMatmul>()); }

}  // namespace ejk::kernels::matmul
