// matmul on Vulkan. Two variants in one space, so the tuner can weigh them against each other:
//   scalar:  a tiled GEMM through shared memory for every dtype (matmul.comp for f32,
//            matmul16.comp for f16 and bf16 through 16-bit storage), f32 accumulation;
//   coopmat: f16 on tensor cores through VK_NV_cooperative_matrix (matmul_coopmat.comp), offered
//            only where the device reports an f16 x f16 -> f32 shape and the build could compile it.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/vulkan/vulkan_device.hpp"
#include "common/builtin.hpp"
#include "ejk/error.hpp"
#include "matmul/matmul.hpp"

namespace ejk::kernels::matmul {
namespace {

struct Push {
  std::uint32_t m, n, k;
  std::uint32_t stride_a, stride_b, stride_c;
  float alpha, beta;
  std::uint32_t group_x, group_y, group_z;
};

const char* const scalar = "variant == \"scalar\"";
const char* const coop = "variant == \"coopmat\"";

std::string shape_name(const CoopMatShape& s) {
  return std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
}

// f16 x f16 -> f32 shapes the shader's tiling fits: every side divides 16, rows of 8 halves.
// The device lists shapes only where it can run them (instance.cpp); the shader also needs
// 16-bit storage and float16 (fp16) and subgroups.
std::vector<CoopMatShape> usable_shapes(const DeviceInfo& dev) {
  std::vector<CoopMatShape> out;
#ifdef EJK_HAVE_COOPMAT
  if (!dev.fp16 || dev.subgroup_size == 0) return out;
  auto fits = [](std::uint32_t x) { return x == 8 || x == 16; };
  for (const auto& s : dev.coopmat)
    if (s.a == DType::f16 && s.c == DType::f32 && s.m == 16 && fits(s.n) && fits(s.k)) out.push_back(s);
#else
  (void)dev;
#endif
  return out;
}

CoopMatShape parse_shape(const std::string& text, const DeviceInfo& dev) {
  for (const auto& s : usable_shapes(dev))
    if (shape_name(s) == text) return s;
  throw InvalidArgument("matmul vulkan: cooperative-matrix shape '" + text + "' is not offered by " + dev.id() + " (" +
                        dev.name + ")");
}

std::int64_t largest_vec(std::int64_t lda, std::int64_t ldb, std::initializer_list<std::int64_t> options) {
  for (auto v : options)
    if (lda % v == 0 && ldb % v == 0) return v;
  return 1;
}

std::uint32_t u32(std::int64_t v) { return static_cast<std::uint32_t>(v); }

class VulkanMatmul final : public Implementation {
 public:
  std::string_view kernel() const override { return "matmul"; }
  Backend backend() const override { return Backend::vulkan; }
  std::vector<ArgDef> args() const override { return matmul_args(); }
  std::vector<std::string> sources() const override {
    std::vector<std::string> s{"matmul/matmul.spv", "matmul/matmul16.spv"};
#ifdef EJK_HAVE_COOPMAT
    s.push_back("matmul/matmul_coopmat.spv");
#endif
    return s;
  }

  // 16-bit dtypes need 16-bit storage buffers.
  bool supports(const Invocation& inv, const DeviceInfo& dev) const override {
    if (inv.args.empty() || inv.args[0].dtype == DType::f32) return true;
    return vulkan::physical_device(dev.index).storage16;
  }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    Problem p = Problem::of(inv);
    std::vector<Value> variants{std::string("scalar")};
    std::vector<Value> shapes;
    if (p.dtype == DType::f16)
      for (const auto& s : usable_shapes(dev)) shapes.push_back(shape_name(s));
    if (!shapes.empty()) variants.push_back(std::string("coopmat"));
    const auto& lim = vulkan::physical_device(dev.index).limits;
    ParamSpace s;
    s.param("variant", variants)
        .param("tile_m", {16, 32, 64, 128}, scalar)
        .param("tile_n", {16, 32, 64, 128}, scalar)
        .param("tile_k", {8, 16, 32}, scalar)
        .param("wpt_m", {1, 2, 4, 8}, scalar)
        .param("wpt_n", {1, 2, 4, 8}, scalar)
        .param("vec", {1, 2, 4}, scalar)
        .param("prefetch", {0, 1}, scalar)
        .constraint("tile_m % wpt_m == 0 && tile_n % wpt_n == 0")
        .constraint("(tile_m / wpt_m) * (tile_n / wpt_n) >= 32")
        .constraint("(tile_m / wpt_m) * (tile_n / wpt_n) <= max_workgroup_size")
        .constraint("tile_n / wpt_n <= max_workgroup_x && tile_m / wpt_m <= max_workgroup_y")
        // Accumulators stay in registers.
        .constraint("wpt_m * wpt_n <= 64")
        .constraint("(prefetch + 1) * tile_k * (tile_m + tile_n + 1) * 4 <= local_mem")
        // Every invocation loads the same number of vectors of each tile.
        .constraint("tile_m * tile_k % ((tile_m / wpt_m) * (tile_n / wpt_n) * vec) == 0")
        .constraint("tile_n * tile_k % ((tile_m / wpt_m) * (tile_n / wpt_n) * vec) == 0")
        // Vector loads need rows that start at a multiple of the width.
        .constraint("lda % vec == 0 && ldb % vec == 0");
    if (!shapes.empty()) {
      s.param("mma", shapes, coop)
          .param("sg_m", {1, 2, 4}, coop)
          .param("sg_n", {1, 2, 4}, coop)
          .param("sg_tile_m", {16, 32, 64, 128}, coop)
          .param("sg_tile_n", {16, 32, 64, 128}, coop)
          .param("block_k", {16, 32, 64}, coop)
          .param("load_vec", {1, 2, 4, 8}, coop)
          .param("buffers", {1, 2}, coop)
          .param("loads_ahead", {1, 2}, coop)
          .param("group_m", {1, 8}, coop)
          .constraint("subgroup_size * sg_m * sg_n <= max_workgroup_size && subgroup_size * sg_m * sg_n <= max_workgroup_x")
          // f32 accumulators per invocation stay in registers.
          .constraint("sg_tile_m * sg_tile_n <= 128 * subgroup_size")
          // A second set of tiles in flight only where accumulators and both sets fit in 192
          // registers (an 8-half load takes four).
          .constraint("loads_ahead == 1 || sg_tile_m * sg_tile_n / subgroup_size + (sg_m * sg_tile_m + sg_n * sg_tile_n) * block_k"
                      " / (subgroup_size * sg_m * sg_n) <= 192")
          // Staging buffers (rows padded by 8 halves) or the epilogue's f32 scratch, whichever is larger.
          .constraint("max(buffers * 2 * ((1 - trans_a) * sg_m * sg_tile_m * (block_k + 8) + trans_a * block_k * (sg_m * sg_tile_m + 8)"
                      " + (1 - trans_b) * block_k * (sg_n * sg_tile_n + 8) + trans_b * sg_n * sg_tile_n * (block_k + 8)),"
                      " sg_m * sg_n * 1024) <= local_mem")
          .constraint("sg_m * sg_tile_m * block_k / 8 % (subgroup_size * sg_m * sg_n) == 0")
          .constraint("sg_n * sg_tile_n * block_k / 8 % (subgroup_size * sg_m * sg_n) == 0")
          .constraint("lda % load_vec == 0 && ldb % load_vec == 0");
    }
    s.bind(MatmulKernel().vars(inv))
        .bind(device_vars(dev))
        .bind({{"lda", p.trans_a ? p.m : p.k},
               {"ldb", p.trans_b ? p.k : p.n},
               {"max_workgroup_x", std::int64_t{lim.maxComputeWorkGroupSize[0]}},
               {"max_workgroup_y", std::int64_t{lim.maxComputeWorkGroupSize[1]}}});
    return s;
  }

  // Largest tiles first; the first that the space admits and that gives nine tenths of the
  // compute units a workgroup wins (else the admitted one with the smallest tiles). Thin shapes
  // get thin tiles.
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    Problem p = Problem::of(inv);
    ParamSpace s = space(inv, dev);
    const std::int64_t lda = p.trans_a ? p.m : p.k, ldb = p.trans_b ? p.k : p.n;
    struct Try {
      Config config;
      std::int64_t tile_m, tile_n;
    };
    std::vector<Try> tries;
    auto shapes = usable_shapes(dev);
    if (p.dtype == DType::f16 && !shapes.empty()) {
      // 16 x 16 x 16 where offered. In the KHR form (docs/backends/vulkan.md) each B fragment is
      // loaded once for the subgroup's rows of a; a tune of 88 configs at f16 4096^3 on an H200
      // put 128 x 128 tiles of 2 x 2 subgroups with two tiles in flight first (556 us, 247
      // TFLOP/s), 128 x 256 at 568 and 16 subgroups' 256 x 128 at 578 (h200-2026-11-28e).
      std::string mma = shape_name(shapes.front());
      for (const auto& sh : shapes)
        if (sh.n == 8 && sh.k == 16) mma = shape_name(sh);
      for (const auto& sh : shapes)
        if (sh.m == 16 && sh.n == 16 && sh.k == 16) mma = shape_name(sh);
      const std::int64_t lv = largest_vec(lda, ldb, {8, 4, 2, 1});
      auto cm = [&](std::int64_t sgm, std::int64_t sgn, std::int64_t tm, std::int64_t tn, std::int64_t bk, std::int64_t buffers,
                    std::int64_t ahead = 1) {
        return Try{Config{{"variant", std::string("coopmat")}, {"mma", mma}, {"sg_m", sgm}, {"sg_n", sgn},
                          {"sg_tile_m", tm}, {"sg_tile_n", tn}, {"block_k", bk}, {"load_vec", lv}, {"buffers", buffers},
                          {"loads_ahead", ahead}, {"group_m", 1}},
                   sgm * tm, sgn * tn};
      };
      if (p.m <= 32) tries.push_back(cm(1, 4, 16, 32, 64, 2));
      tries.push_back(cm(2, 2, 64, 64, 32, 1, 2));  // 128 x 128
      tries.push_back(cm(2, 2, 64, 64, 32, 2));  // 128 x 128
      tries.push_back(cm(2, 2, 32, 64, 32, 2));  // 64 x 128
      tries.push_back(cm(2, 2, 32, 32, 32, 2));  // 64 x 64
      tries.push_back(cm(2, 2, 32, 32, 32, 1));
    }
    const std::int64_t v = largest_vec(lda, ldb, {4, 2, 1});
    auto sc = [&](std::int64_t tm, std::int64_t tn, std::int64_t tk, std::int64_t wm, std::int64_t wn) {
      return Try{Config{{"variant", std::string("scalar")}, {"tile_m", tm}, {"tile_n", tn}, {"tile_k", tk},
                        {"wpt_m", wm}, {"wpt_n", wn}, {"vec", v}, {"prefetch", 1}},
                 tm, tn};
    };
    if (p.m <= 16) tries.push_back(sc(16, 128, 16, 1, 4));
    if (p.n <= 16) tries.push_back(sc(128, 16, 16, 4, 1));
    if (dev.discrete) tries.push_back(sc(128, 128, 16, 8, 8));
    tries.push_back(sc(64, 64, 16, 4, 4));
    tries.push_back(sc(32, 32, 16, 2, 2));
    tries.push_back(sc(32, 32, 8, 2, 2));
    const Config* fallback = nullptr;
    for (const auto& t : tries) {
      if (!s.admits(t.config)) continue;
      // Nine tenths of the compute units busy is enough: 128 tiles of 256 x 128 on 132 units ran
      // 1.43x faster than 256 tiles of 128 x 128 (m 1024, n k 4096, an H200).
      const std::int64_t groups = (p.m + t.tile_m - 1) / t.tile_m * ((p.n + t.tile_n - 1) / t.tile_n) * p.batch;
      if (10 * groups >= 9 * std::int64_t{dev.compute_units}) return t.config;
      // Within a variant the list runs from large tiles to small; the coopmat variant comes first.
      if (!fallback || fallback->text("variant") == t.config.text("variant")) fallback = &t.config;
    }
    if (fallback) return *fallback;
    auto all = s.enumerate();
    if (all.empty()) throw SelectionError("matmul vulkan: no config fits " + dev.id() + " for " + inv.signature());
    return all.front();
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    Problem p = Problem::of(inv);
    auto& dev = vulkan::vulkan_device(device);
    const DeviceInfo& info = dev.info();
    if (p.dtype != DType::f32 && !dev.physical().storage16)
      throw InvalidArgument("matmul vulkan: " + info.id() + " has no 16-bit storage buffers for " + std::string(to_string(p.dtype)));
    if (p.m == 0 || p.n == 0 || p.batch == 0) return;

    Push push{u32(p.m), u32(p.n), u32(p.k), u32(p.batch_stride_a), u32(p.batch_stride_b), u32(p.batch_stride_c),
              static_cast<float>(p.alpha), static_cast<float>(p.beta), 0, 0, 0};
    vulkan::Launch l;
    l.buffers = {&args[0].buffer(), &args[1].buffer(), &args[2].buffer()};
    std::int64_t tile_m, tile_n;
    const std::string& variant = config.text("variant");
    if (variant == "coopmat") {
      if (p.dtype != DType::f16) throw InvalidArgument("matmul vulkan: the coopmat variant takes f16, got " + std::string(to_string(p.dtype)));
      CoopMatShape mma = parse_shape(config.text("mma"), info);
      const auto sgm = config.get("sg_m"), sgn = config.get("sg_n"), bk = config.get("block_k");
      const auto fm = config.get("sg_tile_m") / mma.m, fn = config.get("sg_tile_n") / mma.n;
      tile_m = sgm * config.get("sg_tile_m");
      tile_n = sgn * config.get("sg_tile_n");
      const std::int64_t sg = info.subgroup_size;
      l.spirv = "matmul/matmul_coopmat.spv";
      l.local_size = {u32(sg * sgm * sgn), 1, 1};
      const std::int64_t buffers = config.get("buffers");
      l.spec = {u32(sg), mma.m, mma.n, mma.k, u32(sgm), u32(sgn), u32(fm), u32(fn), u32(bk),
                u32(config.get("load_vec")), u32(buffers), p.trans_a, p.trans_b,
                u32(config.get("loads_ahead")), u32(config.get("group_m"))};
      const std::int64_t a = p.trans_a ? bk * (tile_m + 8) : tile_m * (bk + 8);
      const std::int64_t b = p.trans_b ? tile_n * (bk + 8) : bk * (tile_n + 8);
      l.shared_bytes = u32(std::max(buffers * 2 * (a + b), sgm * sgn * std::int64_t{mma.m} * mma.n * 4));
      l.full_subgroups = true;
    } else if (variant == "scalar") {
      tile_m = config.get("tile_m");
      tile_n = config.get("tile_n");
      const auto tk = config.get("tile_k"), wm = config.get("wpt_m"), wn = config.get("wpt_n");
      const auto prefetch = config.get("prefetch");
      l.spirv = p.dtype == DType::f32 ? "matmul/matmul.spv" : "matmul/matmul16.spv";
      l.local_size = {u32(tile_n / wn), u32(tile_m / wm), 1};
      l.spec = {u32(tile_m), u32(tile_n), u32(tk), u32(wm), u32(wn), u32(config.get("vec")), u32(prefetch),
                p.trans_a, p.trans_b, p.dtype == DType::bf16};
      l.shared_bytes = u32((prefetch + 1) * tk * ((tile_m + 1 - p.trans_a) + (tile_n + p.trans_b)) * 4);
    } else {
      throw InvalidArgument("matmul vulkan: unknown variant '" + variant + "' (scalar, coopmat)");
    }

    // Grids beyond the device's workgroup counts go out as several dispatches.
    const auto& lim = dev.physical().limits;
    const std::int64_t groups[3] = {(p.n + tile_n - 1) / tile_n, (p.m + tile_m - 1) / tile_m, p.batch};
    for (std::int64_t z = 0; z < groups[2]; z += lim.maxComputeWorkGroupCount[2])
      for (std::int64_t y = 0; y < groups[1]; y += lim.maxComputeWorkGroupCount[1])
        for (std::int64_t x = 0; x < groups[0]; x += lim.maxComputeWorkGroupCount[0]) {
          push.group_x = u32(x);
          push.group_y = u32(y);
          push.group_z = u32(z);
          l.groups = {u32(std::min<std::int64_t>(groups[0] - x, lim.maxComputeWorkGroupCount[0])),
                      u32(std::min<std::int64_t>(groups[1] - y, lim.maxComputeWorkGroupCount[1])),
                      u32(std::min<std::int64_t>(groups[2] - z, lim.maxComputeWorkGroupCount[2]))};
          l.push = vulkan::push_bytes(push);
          dev.dispatch(l);
        }
  }
};

}  // namespace

EJK_BUILTIN(implementations, "matmul/vulkan") { r.add(std::make_shared<VulkanMatmul>()); }

}  // namespace ejk::kernels::matmul
