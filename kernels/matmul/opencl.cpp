// matmul on OpenCL: the tiled xgemm of matmul.cl, one program per configuration.
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
#include "matmul/opencl.hpp"

namespace ejk::kernels::matmul {
namespace {

constexpr const char* source_key = "matmul/matmul.cl";

struct Geometry {
  std::int64_t mdimc, ndimc, mwi, nwi, kwg, kwi, sa, sb, pf, vwm, vwn, strm, strn, order;

  // Parameters a space leaves out take the value that costs nothing: no staging, no
  // prefetch, scalar A loads, contiguous vectors.
  static Geometry of(const Config& c) {
    return {c.get("mdimc"), c.get("ndimc"), c.get("mwi"),  c.get("nwi"),  c.get("kwg"),
            c.get("kwi"),   c.get("sa", 0), c.get("sb", 0),   c.get("pf", 0), c.get("vwm", 1),
            c.get("vwn"),   c.get("strm", 0), c.get("strn", 0), c.get("order", 0)};
  }
  std::int64_t mwg() const { return mdimc * mwi; }
  std::int64_t nwg() const { return ndimc * nwi; }

  // What the kernel source relies on, for configs that reach run() without their space.
  void check(const Config& c, const Problem& p) const {
    auto width = [](std::int64_t w) { return w == 1 || w == 2 || w == 4 || w == 8 || w == 16; };
    auto staged_loads = [](std::int64_t kwg_, std::int64_t tile, std::int64_t w, std::int64_t threads) {
      return (kwg_ * tile / w) % threads == 0;
    };
    const std::int64_t threads = mdimc * ndimc;
    auto flag = [](std::int64_t f) { return f == 0 || f == 1; };
    bool ok = mdimc > 0 && ndimc > 0 && mwi > 0 && nwi > 0 && kwg > 0 && width(kwi) && width(vwm) && width(vwn) &&
              mwi % vwm == 0 && nwi % vwn == 0 && kwg % kwi == 0 && flag(sa) && flag(sb) && flag(pf) && flag(strm) &&
              flag(strn) && flag(order) &&
              (!sa || (staged_loads(kwg, mwg(), vwm, threads) && (p.trans_a || kwg % vwm == 0))) &&
              (!sb || (staged_loads(kwg, nwg(), vwn, threads) && (!p.trans_b || kwg % vwn == 0)));
    if (!ok) throw InvalidArgument("matmul on OpenCL: inconsistent config " + c.canonical());
  }
};


class OpenCLMatmul final : public clc::Implementation {
 public:
  using clc::Implementation::Implementation;
  std::string_view kernel() const override { return "matmul"; }
  std::vector<ArgDef> args() const override { return matmul_args(); }
  std::vector<std::string> sources() const override { return {source_key}; }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    return opencl_space(inv, dev, clc::is_cpu(dev));
  }
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    return opencl_heuristic(inv, dev, clc::is_cpu(dev));
  }

  void prepare(const Invocation& inv, const Config& config, Device& device) const override {
    const Problem p = Problem::of(inv);
    if (p.m == 0 || p.n == 0 || p.batch == 0) return;
    const Geometry g = Geometry::of(config);
    g.check(config, p);
    (void)program(p, g, clc::clc_device(device));
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    Problem p = Problem::of(inv);
    auto& dev = clc::clc_device(device);
    if (p.m == 0 || p.n == 0 || p.batch == 0) return;
    const Geometry g = Geometry::of(config);
    g.check(config, p);
    const std::int64_t lda = p.trans_a ? p.m : p.k, ldb = p.trans_b ? p.k : p.n, ldc = p.n;
    auto k = program(p, g, dev);
    const clc::Range global(static_cast<std::size_t>(ceil_div(p.n, g.nwg()) * g.ndimc),
                               static_cast<std::size_t>(ceil_div(p.m, g.mwg()) * g.mdimc),
                               static_cast<std::size_t>(p.batch));
    const clc::Range local(static_cast<std::size_t>(g.ndimc), static_cast<std::size_t>(g.mdimc), 1);
    dev.launch(*k, global, local, static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(p.k),
               static_cast<float>(p.alpha), static_cast<float>(p.beta), args[0], static_cast<int>(lda),
               static_cast<std::int64_t>(p.batch_stride_a), args[1], static_cast<int>(ldb), static_cast<std::int64_t>(p.batch_stride_b),
               args[2], static_cast<int>(ldc), static_cast<std::int64_t>(p.batch_stride_c));
  }

 private:
  // The xgemm kernel of this problem and geometry, built on first use.
  static std::shared_ptr<clc::Kernel> program(const Problem& p, const Geometry& g, clc::Device& dev) {
    const std::int64_t lda = p.trans_a ? p.m : p.k, ldb = p.trans_b ? p.k : p.n, ldc = p.n;
    for (std::int64_t v : {p.m, p.n, p.k})
      if (v > INT_MAX)
        throw InvalidArgument("matmul on OpenCL: m, n and k must be below 2^31, got m " + std::to_string(p.m) +
                              " n " + std::to_string(p.n) + " k " + std::to_string(p.k));
    const std::int64_t largest = std::max({p.m * p.k, p.k * p.n, p.m * p.n});
    auto aligned = [](std::int64_t ld, std::int64_t stride, std::int64_t w) {
      return ld % w == 0 && stride % w == 0 ? "1" : "0";
    };
    std::string options;
    options.reserve(320);
    auto def = [&](const char* name, const std::string& v) {
      options += " -D";
      options += name;
      options += '=';
      options += v;
    };
    auto defi = [&](const char* name, std::int64_t v) { def(name, std::to_string(v)); };
    defi("DTYPE", p.dtype == DType::f32 ? 0 : p.dtype == DType::f16 ? 1 : 2);
    defi("TRANS_A", p.trans_a);
    defi("TRANS_B", p.trans_b);
    defi("MDIMC", g.mdimc);
    defi("NDIMC", g.ndimc);
    defi("MWI", g.mwi);
    defi("NWI", g.nwi);
    defi("KWG", g.kwg);
    defi("KWI", g.kwi);
    defi("SA", g.sa);
    defi("SB", g.sb);
    defi("PF", g.pf);
    defi("VWM", g.vwm);
    defi("VWN", g.vwn);
    defi("STRM", g.strm);
    defi("STRN", g.strn);
    def("ALIGN_A", aligned(lda, p.batch_stride_a, g.vwm));
    def("ALIGN_B", aligned(ldb, p.batch_stride_b, g.vwn));
    def("ALIGN_C", aligned(ldc, p.batch_stride_c, g.vwn));
    def("IDX", largest < INT_MAX ? "int" : "long");
    defi("FMA", dev.hardware_fma());
    defi("ORDER", g.order);
    return dev.kernel(source_key, options, "xgemm");
  }
};

}  // namespace

ParamSpace opencl_space(const Invocation& inv, const DeviceInfo& dev, bool cpu_family) {
  ParamSpace s;
  if (cpu_family) {
    // One or a few work-items per workgroup, each a wide register tile of vectors: the
    // driver maps vectors onto SIMD registers and workgroups onto cores. A and B are read
    // where they lie (the caches stage them); only a transposed B, whose direct reads are
    // gathers, may be staged, and then by single-work-item groups: CPU drivers turn barriers
    // into loops that keep private variables (the accumulators) in memory.
    s.param("mdimc", {1, 2})
        .param("ndimc", {1, 2})
        .param("mwi", {4, 8, 12, 16})
        .param("nwi", {16, 32, 64})
        .param("kwg", {16, 64})
        .param("kwi", {1, 2, 4})
        .param("sb", {0, 1}, "trans_b == 1")
        .param("vwm", {1, 4, 8}, "trans_a == 1")
        .param("vwn", {8, 16})
        .param("strm", {0, 1}, "mdimc > 1")
        .param("strn", {0, 1}, "ndimc > 1")
        // 1: workgroups run down the columns of tiles, so a deep B panel stays in cache.
        .param("order", {0, 1})
        // Accumulators (mwi * nwi / 16 vectors of 16 lanes) must stay in registers.
        .constraint("mwi * nwi <= 512")
        .constraint("sb == 0 || mdimc * ndimc == 1")
        .constraint("sb * kwg * ndimc * nwi * 4 <= local_mem")
        .constraint("sb == 0 || kwg % vwn == 0");
  } else {
    // 64-1024 work-items of 4-64 accumulators each; tiles staged in local memory (with the
    // next chunk prefetched into registers) or read through the caches; 2- or 4-wide vector
    // loads. A work-item's B and C vectors may be strided so that neighbours touch
    // neighbouring addresses; its A vectors are read by whole warps at once either way.
    s.param("mdimc", {8, 16, 32})
        .param("ndimc", {8, 16, 32})
        .param("mwi", {2, 4, 8})
        .param("nwi", {2, 4, 8})
        .param("kwg", {8, 16, 32})
        .param("kwi", {2, 8})
        .param("sa", {0, 1})
        .param("sb", {0, 1})
        .param("pf", {0, 1}, "sa == 1 || sb == 1")
        .param("vwm", {2, 4}, "sa == 1 || trans_a == 1")
        .param("vwn", {2, 4})
        .param("strn", {0, 1})
        // Registers: NVIDIA's driver limits this kernel to 256 work-items a group (measured
        // on an H100: CL_KERNEL_WORK_GROUP_SIZE 256 for a 32x32 group), whatever it compiles.
        .constraint("mdimc * ndimc <= 256")
        // Staged tiles are f32 in local memory.
        .constraint("(sa * kwg * mdimc * mwi + sb * kwg * ndimc * nwi) * 4 <= local_mem")
        // Every work-item moves the same number of vectors of a staged tile.
        .constraint("sa == 0 || kwg * (mwi / vwm) % ndimc == 0")
        .constraint("sb == 0 || kwg * (nwi / vwn) % mdimc == 0")
        // Staged tiles are read in vectors along k where k is the contiguous dimension.
        .constraint("sa == 0 || trans_a == 1 || kwg % vwm == 0")
        .constraint("sb == 0 || trans_b == 0 || kwg % vwn == 0");
  }
  s.constraint("mdimc * ndimc <= max_workgroup_size")
      .constraint("kwg % kwi == 0")
      .constraint("mwi % vwm == 0")
      .constraint("nwi % vwn == 0")
      .bind(MatmulKernel().vars(inv))
      .bind(device_vars(dev));
  return s;
}

Config opencl_heuristic(const Invocation& inv, const DeviceInfo& dev, bool cpu_family) {
  Problem p = Problem::of(inv);
  if (cpu_family) {
    // One work-item per group with 12x32 accumulators (24 AVX-512 registers); operands read
    // in place, but a transposed B is packed k-major so its rows are vector loads.
    Config c{{"mdimc", 1}, {"ndimc", 1}, {"mwi", 12}, {"nwi", 32}, {"kwg", 64}, {"kwi", 4}, {"vwn", 16}};
    if (p.trans_a) c.set("vwm", 4);
    if (p.trans_b) c.set("sb", 1);
    // Once a B panel (k x 32) outgrows the L2 cache's share, reuse it across row tiles.
    c.set("order", p.k >= 2048 ? 1 : 0);
    return c;
  }
  // Large products: 16x16 work-items of 8x4 accumulators (128x64 tiles), the winner of a
  // sweep on an H100 at 1024^3; smaller products take smaller tiles so that there are enough
  // workgroups to fill the device. Tiles are staged in local memory with the next chunk
  // prefetched, and read with float4 loads.
  const std::int64_t cus = std::max<std::int64_t>(dev.compute_units, 1);
  auto tiles = [&](std::int64_t tm, std::int64_t tn) { return p.batch * ceil_div(p.m, tm) * ceil_div(p.n, tn); };
  std::int64_t dim = 8, mwi = 4, nwi = 4;
  if (tiles(128, 64) >= 2 * cus && dev.max_workgroup_size >= 256) dim = 16, mwi = 8, nwi = 4;
  else if (tiles(64, 64) >= 2 * cus) mwi = 8, nwi = 8;
  Config c{{"mdimc", dim}, {"ndimc", dim}, {"mwi", mwi}, {"nwi", nwi}, {"kwg", 16}, {"kwi", 8},
           {"sa", 1},      {"sb", 1},      {"pf", 1},    {"vwm", 4},   {"vwn", 4},  {"strn", 1}};
  if (dev.local_mem < 16 * 1024) c.set("kwg", 8);
  return c;
}

EJK_BUILTIN(implementations, "matmul/opencl") { clc::add<OpenCLMatmul>(r); }

}  // namespace ejk::kernels::matmul
