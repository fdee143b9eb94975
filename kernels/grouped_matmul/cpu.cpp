// grouped_matmul and grouped_matmul_tgmm on the native CPU backend: one GEMM per group with
// matmul's packed native kernel (per-ISA builds, its blocking parameters), or OpenBLAS for f32.
// A group is a strided view of the operands, so nothing is copied:
//   grouped_matmul       out[off_g .., :] = lhs[off_g .., :] . op(rhs[g])
//   grouped_matmul_tgmm  out[g] = lhs[off_g .., :]^T . grad[off_g .., :]
// Empty groups are skipped (tgmm: their output block is zeroed).
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#ifdef EJK_HAVE_OPENBLAS
#include <cblas.h>
#endif

#include "backends/cpu/cpu_device.hpp"
#include "common/builtin.hpp"
#include "ejk/error.hpp"
#include "grouped_matmul/grouped_matmul.hpp"
#include "matmul/cpu_gemm_native.hpp"

namespace ejk::kernels::grouped_matmul {
namespace {

namespace gemm = matmul::cpu;

class CpuGroupedMatmul final : public Implementation {
 public:
  explicit CpuGroupedMatmul(Mode mode) : kernel_(mode) {}
  std::string_view kernel() const override { return kernel_.name(); }
  Backend backend() const override { return Backend::cpu; }
  std::vector<ArgDef> args() const override { return kernel_.args(); }

  // matmul's native blocking; OpenBLAS as another algorithm for f32.
  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    const Problem p = Problem::of(inv);
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
        .bind(kernel_.vars(inv))
        .bind(device_vars(dev))
        .bind({{"lanes", std::int64_t{gemm::native_lanes()}}});
    return s;
  }

  // matmul's choice for its native kernel, smaller row blocks where groups are short.
  Config heuristic(const Invocation& inv, const DeviceInfo& /*dev*/) const override {
    const Problem p = Problem::of(inv);
    const bool short_rows = p.mode == Mode::gmm && p.m / p.groups < 96;
    if (gemm::native_lanes() == gemm::avx512_lanes)
      return {{"algo", std::string("native")}, {"mr", 6}, {"nv", 3}, {"mc", 48}, {"kc", 512}, {"nc", 2048}};
    return {{"algo", std::string("native")}, {"mr", 6}, {"nv", 2}, {"mc", short_rows ? 48 : 96}, {"kc", 256}, {"nc", 2048}};
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    auto& pool = ejk::cpu::cpu_device(device).pool();
    const auto* sz = ejk::cpu::cpu_buffer(args[arg::group_sizes].buffer()).as<std::int32_t>();
    const auto o = group_offsets(p, std::vector<std::int64_t>(sz, sz + p.groups));
    const auto* lhs = static_cast<const std::byte*>(ejk::cpu::cpu_buffer(args[arg::lhs].buffer()).data());
    const auto* rhs = static_cast<const std::byte*>(ejk::cpu::cpu_buffer(args[arg::rhs].buffer()).data());
    auto* out = static_cast<std::byte*>(ejk::cpu::cpu_buffer(args[arg::out].buffer()).data());
    const std::size_t e = dtype_size(p.dtype);
    const bool gmm = p.mode == Mode::gmm;
    const std::string& algo = config.text("algo");
    if (algo != "native" && algo != "openblas")
      throw InvalidArgument(std::string(kernel()) + " cpu: unknown algo '" + algo + "' (native, openblas)");
#ifndef EJK_HAVE_OPENBLAS
    if (algo == "openblas") throw InvalidArgument(std::string(kernel()) + " cpu: this build has no OpenBLAS (algo native)");
#endif
    if (algo == "openblas" && p.dtype != DType::f32)
      throw InvalidArgument(std::string(kernel()) + " cpu: algo openblas takes f32, got " + std::string(to_string(p.dtype)));
    gemm::Blocking blk{};
    if (algo == "native")
      blk = {static_cast<int>(config.get("mc")), static_cast<int>(config.get("kc")), static_cast<int>(config.get("nc")),
             static_cast<int>(config.get("mr")), static_cast<int>(config.get("nv"))};

    std::vector<float> widened;
    for (std::int64_t g = 0; g < p.groups; ++g) {
      const std::int64_t off = o[static_cast<std::size_t>(g)], rows = o[static_cast<std::size_t>(g + 1)] - off;
      // The product's sizes and operands: M x N = A (M x K) . B (K x N), C row-major with ldc N.
      gemm::Operands op{};
      std::int64_t c_first;  // first element of C in out
      if (gmm) {
        if (rows == 0) continue;
        op = {rows, p.n, p.k, lhs + off * p.k * e, p.k, 1, rhs + g * p.k * p.n * e, p.trans_rhs ? 1 : p.n,
              p.trans_rhs ? p.k : 1, nullptr, p.n, 1.f, p.dtype};
        c_first = off * p.n;
      } else {
        op = {p.k, p.n, rows, lhs + off * p.k * e, 1, p.k, rhs + off * p.n * e, p.n, 1, nullptr, p.n, 1.f, p.dtype};
        c_first = g * p.k * p.n;
      }
      const std::int64_t count = op.m * op.n;
      if (count == 0) continue;
#ifdef EJK_HAVE_OPENBLAS
      if (algo == "openblas") {
        float* c = reinterpret_cast<float*>(out) + c_first;
        if (op.k == 0) {
          std::fill(c, c + count, 0.f);
          continue;
        }
        // lhs rows are k wide in both kernels; tgmm reads lhs transposed.
        const bool tb = gmm && p.trans_rhs;
        cblas_sgemm(CblasRowMajor, gmm ? CblasNoTrans : CblasTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(op.m),
                    static_cast<int>(op.n), static_cast<int>(op.k), 1.f, static_cast<const float*>(op.a),
                    static_cast<int>(p.k), static_cast<const float*>(op.b), static_cast<int>(tb ? p.k : p.n), 0.f, c,
                    static_cast<int>(op.n));
        continue;
      }
#endif
      // The native kernel accumulates into f32 C; f16/bf16 results go through an f32 copy.
      if (p.dtype == DType::f32) {
        op.c = reinterpret_cast<float*>(out) + c_first;
      } else {
        widened.resize(static_cast<std::size_t>(count));
        op.c = widened.data();
      }
      std::fill(op.c, op.c + count, 0.f);
      gemm::gemm_native(op, blk, pool);
      if (p.dtype != DType::f32) {
        auto* dst = reinterpret_cast<std::uint16_t*>(out) + c_first;
        if (p.dtype == DType::f16)
          for (std::int64_t i = 0; i < count; ++i) dst[i] = f32_to_f16(widened[static_cast<std::size_t>(i)]);
        else
          for (std::int64_t i = 0; i < count; ++i) dst[i] = f32_to_bf16(widened[static_cast<std::size_t>(i)]);
      }
    }
  }

 private:
  GroupedMatmulKernel kernel_;
};

}  // namespace

EJK_BUILTIN(implementations, "grouped_matmul/cpu") {
  for (Mode mode : {Mode::gmm, Mode::tgmm}) r.add(std::make_shared<CpuGroupedMatmul>(mode));
}

}  // namespace ejk::kernels::grouped_matmul
