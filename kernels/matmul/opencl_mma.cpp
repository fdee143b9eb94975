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
#include "ejk/error.hpp"
#include "matmul/matmul.hpp"

namespace ejk::kernels::matmul {
namespace {

constexpr const char* source_key = "matmul/matmul_mma.cl";
constexpr const char* mma_helpers_key = "common/clc_mma.h";

// Local memory of a config in bytes: the stages' tiles, rows padded by 8 elements (16 bytes)
// unless swizzled.
constexpr const char* local_bytes =
    "stages * (bm * bk + bn * bk + (1 - swizzle) * 8 * (trans_a * bk + (1 - trans_a) * bm + trans_b * bn + (1 - trans_b) * bk)) * 2";

struct Tiles {
  std::int64_t bm, bn, bk, wm, wn, stages, group_m, swizzle, pipe;
  static Tiles of(const Config& c) {
    return {c.get("bm"),     c.get("bn"),      c.get("bk"),      c.get("wm"),  c.get("wn"),
            c.get("stages"), c.get("group_m"), c.get("swizzle"), c.get("pipe")};
  }
  std::int64_t threads() const { return wm * wn * 32; }
  std::int64_t local(const Problem& p) const {
    const std::int64_t pad = swizzle ? 0 : 8;
    const std::int64_t a = p.trans_a ? bk * (bm + pad) : bm * (bk + pad);
    const std::int64_t b = p.trans_b ? bn * (bk + pad) : bk * (bn + pad);
    return stages * (a + b) * 2;
  }
  // What matmul_mma.cl relies on, for configs that reach run() without their space.
  void check(const Config& c, const Problem& p, const DeviceInfo& dev) const {
    const bool ok = bm > 0 && bn > 0 && (bk == 16 || bk == 32 || bk == 64) && wm > 0 && wn > 0 && bm % wm == 0 &&
                    bn % wn == 0 && (bm / wm) % 16 == 0 && (bn / wn) % 16 == 0 && stages >= 2 && stages <= 8 &&
                    group_m >= 1 && (swizzle == 0 || swizzle == 1) && (pipe == 0 || pipe == 1) &&
                    threads() <= std::int64_t{dev.max_workgroup_size};
    if (!ok) throw InvalidArgument("matmul on OpenCL tensor cores: inconsistent config " + c.canonical());
    if (local(p) > std::int64_t{dev.local_mem})
      throw InvalidArgument("matmul on OpenCL tensor cores: config " + c.canonical() + " needs " +
                            std::to_string(local(p)) + " bytes of local memory, " + dev.id() + " has " +
                            std::to_string(dev.local_mem));
  }
};

bool offered(const Problem& p, const DeviceInfo& dev) {
  if (p.dtype != DType::f16 && p.dtype != DType::bf16) return false;
  // cp.async moves 16-byte units: rows and batch strides of a and b in multiples of 8 elements.
  const std::int64_t lda = p.trans_a ? p.m : p.k, ldb = p.trans_b ? p.k : p.n;
  return dev.offers({16, 8, 16, p.dtype, DType::f32}) && lda % 8 == 0 && ldb % 8 == 0 && p.batch_stride_a % 8 == 0 &&
         p.batch_stride_b % 8 == 0 && std::max({p.m, p.n, p.k}) < INT_MAX;
}

class OpenCLMatmulMma final : public clc::Implementation {
 public:
  using clc::Implementation::Implementation;
  std::string_view kernel() const override { return "matmul"; }
  int priority() const override { return 1; }
  std::vector<ArgDef> args() const override { return matmul_args(); }
  std::vector<std::string> sources() const override { return {source_key, mma_helpers_key, clc::prelude_source}; }

  bool supports(const Invocation& inv, const DeviceInfo& dev) const override {
    return backend() == Backend::opencl && offered(Problem::of(inv), dev);
  }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    ParamSpace s;
    s.param("bm", {64, 128, 256})
        .param("bn", {64, 128, 256})
        .param("bk", {16, 32, 64})
        .param("wm", {1, 2, 4})
        .param("wn", {1, 2, 4})
        .param("stages", {2, 3, 4})
        .param("group_m", {1, 8})
        .param("swizzle", {0, 1})
        .param("pipe", {0, 1})
        // 4 or 8 warps, each a tile of 16-row by 16-column multiples, at most 64 x 64 of
        // accumulators (128 registers a work-item).
        .constraint("wm * wn == 4 || wm * wn == 8")
        .constraint("(bm / wm) % 16 == 0 && (bn / wn) % 16 == 0")
        .constraint("(bm / wm) * (bn / wn) <= 4096")
        .constraint("wm * wn * 32 <= max_workgroup_size")
        .constraint(std::string(local_bytes) + " <= local_mem")
        // Tiles no larger than the product needs.
        .constraint("bm <= 64 || m > 64")
        .constraint("bn <= 64 || n > 64")
        .bind(MatmulKernel().vars(inv))
        .bind(device_vars(dev));
    return s;
  }

  // The largest tile of these that gives every compute unit a workgroup (else the smallest). On
  // an H200 at 4096^3 (bench/results/h200-2026-11-27/opencl-mma-gemm): 256 x 128 tiles of 8
  // warps, 16-deep slices in 4 swizzled stages with fragments double-buffered, 294 TFLOP/s;
  // 128 x 128 x 32 in 2 padded stages 282.
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    const Problem p = Problem::of(inv);
    const ParamSpace s = space(inv, dev);
    const std::int64_t cus = std::max<std::int64_t>(dev.compute_units, 1);
    auto make = [](std::int64_t bm, std::int64_t bn, std::int64_t bk, std::int64_t wm, std::int64_t wn,
                   std::int64_t stages, std::int64_t swizzle, std::int64_t pipe) {
      return Config{{"bm", bm},         {"bn", bn},     {"bk", bk},           {"wm", wm},      {"wn", wn},
                    {"stages", stages}, {"group_m", 8}, {"swizzle", swizzle}, {"pipe", pipe}};
    };
    const Config tries[] = {make(256, 128, 16, 4, 2, 4, 1, 1), make(128, 128, 32, 2, 2, 2, 0, 0),
                            make(64, 128, 32, 2, 2, 4, 1, 0), make(64, 64, 32, 2, 2, 4, 1, 0)};
    const Config* last = nullptr;
    for (const Config& c : tries) {
      if (!s.admits(c)) continue;
      last = &c;
      if (p.batch * ceil_div(p.m, c.get("bm")) * ceil_div(p.n, c.get("bn")) >= cus) return c;
    }
    if (last) return *last;
    auto all = s.enumerate();
    if (all.empty()) throw SelectionError("matmul on OpenCL tensor cores: no config fits " + dev.id() + " for " + inv.signature());
    return all.front();
  }

  void prepare(const Invocation& inv, const Config& config, Device& device) const override {
    const Problem p = Problem::of(inv);
    if (p.m == 0 || p.n == 0 || p.batch == 0) return;
    auto& dev = clc::clc_device(device);
    const Tiles g = Tiles::of(config);
    g.check(config, p, dev.info());
    (void)program(p, g, dev);
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    if (p.m == 0 || p.n == 0 || p.batch == 0) return;
    auto& dev = clc::clc_device(device);
    const Tiles g = Tiles::of(config);
    g.check(config, p, dev.info());
    const std::int64_t lda = p.trans_a ? p.m : p.k, ldb = p.trans_b ? p.k : p.n, ldc = p.n;
    auto k = program(p, g, dev);
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
  static std::shared_ptr<clc::Kernel> program(const Problem& p, const Tiles& g, clc::Device& dev) {
    std::string options;
    auto def = [&](const char* name, std::int64_t v) {
      options += " -D";
      options += name;
      options += '=';
      options += std::to_string(v);
    };
    def("BM", g.bm);
    def("BN", g.bn);
    def("BK", g.bk);
    def("WM", g.wm);
    def("WN", g.wn);
    def("STAGES", g.stages);
    def("GROUP_M", g.group_m);
    def("TRANS_A", p.trans_a);
    def("TRANS_B", p.trans_b);
    def("BF16", p.dtype == DType::bf16);
    def("SWIZZLE", g.swizzle);
    def("PIPE", g.pipe);
    return dev.kernel(source_key, options, "gemm_mma");
  }
};

}  // namespace

EJK_BUILTIN(implementations, "matmul/opencl_mma") { clc::add<OpenCLMatmulMma>(r); }

}  // namespace ejk::kernels::matmul
