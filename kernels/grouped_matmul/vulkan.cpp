// grouped_matmul and grouped_matmul_tgmm on Vulkan: the tiled GEMM of grouped_matmul.glsl, the
// plan of opencl.cpp (gmm: one workgroup per column tile and row-tile slot, the slot's group
// found on the device; tgmm: one per output tile and group). "16" modules read and write f16/bf16
// through 16-bit storage; the others only f32, so devices without 16-bit storage still run f32.
#include <memory>
#include <string>

#include "backends/vulkan/vulkan_device.hpp"
#include "common/builtin.hpp"
#include "common/dtype_code.hpp"
#include "ejk/error.hpp"
#include "grouped_matmul/grouped_matmul.hpp"
#include "grouped_matmul/space.hpp"

namespace ejk::kernels::grouped_matmul {
namespace {

// Mirrors the shader's push-constant block.
struct Push {
  std::uint32_t m, n, k, groups, dtype;
};

std::uint32_t u32(std::int64_t v) { return static_cast<std::uint32_t>(v); }

Vars workgroup_limits(const DeviceInfo& dev) {
  const auto& lim = vulkan::physical_device(dev.index).limits;
  return {{"max_workgroup_x", std::int64_t{lim.maxComputeWorkGroupSize[0]}},
          {"max_workgroup_y", std::int64_t{lim.maxComputeWorkGroupSize[1]}}};
}

class VulkanGroupedMatmul final : public Implementation {
 public:
  explicit VulkanGroupedMatmul(Mode mode) : kernel_(mode) {}
  std::string_view kernel() const override { return kernel_.name(); }
  Backend backend() const override { return Backend::vulkan; }
  std::vector<ArgDef> args() const override { return kernel_.args(); }
  std::vector<std::string> sources() const override {
    if (kernel_.name() == "grouped_matmul")
      return {"grouped_matmul/grouped_matmul_gmm.spv", "grouped_matmul/grouped_matmul_gmm16.spv"};
    return {"grouped_matmul/grouped_matmul_tgmm.spv", "grouped_matmul/grouped_matmul_tgmm16.spv"};
  }

  // 16-bit dtypes need 16-bit storage buffers.
  bool supports(const Invocation& inv, const DeviceInfo& dev) const override {
    if (inv.args.empty() || inv.args[0].dtype == DType::f32) return true;
    return vulkan::physical_device(dev.index).storage16;
  }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    ParamSpace s = device_space(inv, dev, workgroup_limits(dev));
    s.constraint("tile_n / wpt_n <= max_workgroup_x && tile_m / wpt_m <= max_workgroup_y");
    return s;
  }
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    const Config c = device_heuristic(inv, dev, dev.discrete, workgroup_limits(dev));
    if (space(inv, dev).admits(c)) return c;
    auto all = space(inv, dev).enumerate();
    if (all.empty()) throw SelectionError(inv.kernel + " vulkan: no config fits " + dev.id() + " for " + inv.signature());
    return all.front();
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    const std::string where = std::string(kernel()) + " vulkan";
    check_config(where, config);
    auto& dev = vulkan::vulkan_device(device);
    const bool wide = p.dtype != DType::f32;
    if (wide && !dev.physical().storage16)
      throw InvalidArgument(where + ": " + dev.info().id() + " has no 16-bit storage buffers for " + std::string(to_string(p.dtype)));
    const bool gmm = p.mode == Mode::gmm;
    if (p.n == 0 || (gmm ? p.m == 0 : p.k == 0)) return;
    const std::int64_t tm = config.get("tile_m"), tn = config.get("tile_n"), tk = config.get("tile_k"),
                       wm = config.get("wpt_m"), wn = config.get("wpt_n");
    const std::int64_t groups[3] = {ceil_div(p.n, tn), gmm ? ceil_div(p.m, tm) + p.groups : ceil_div(p.k, tm),
                                    gmm ? 1 : p.groups};
    const auto& lim = dev.physical().limits;
    for (int d = 0; d < 3; ++d)
      if (groups[d] > lim.maxComputeWorkGroupCount[d])
        throw InvalidArgument(where + ": " + std::to_string(groups[d]) + " workgroups along dimension " + std::to_string(d) +
                              " exceed the limit " + std::to_string(lim.maxComputeWorkGroupCount[d]) + " of " + dev.info().id() +
                              " (larger tiles need fewer)");
    const Push push{u32(p.m), u32(p.n), u32(p.k), u32(p.groups),
                    static_cast<std::uint32_t>(dtype_code(p.dtype))};
    const std::string spirv = std::string("grouped_matmul/grouped_matmul_") + (gmm ? "gmm" : "tgmm") + (wide ? "16.spv" : ".spv");
    vulkan::Launch l;
    l.spirv = spirv;
    l.local_size = {u32(tn / wn), u32(tm / wm), 1};
    l.spec = {u32(tm), u32(tn), u32(tk), u32(wm), u32(wn), u32(p.trans_rhs)};
    l.push = vulkan::push_bytes(push);
    l.buffers = {&args[arg::lhs].buffer(), &args[arg::rhs].buffer(), &args[arg::group_sizes].buffer(), &args[arg::out].buffer()};
    l.groups = {u32(groups[0]), u32(groups[1]), u32(groups[2])};
    l.shared_bytes = u32(tk * (tm + tn + 2) * 4);
    dev.dispatch(l);
  }

 private:
  GroupedMatmulKernel kernel_;
};

}  // namespace

EJK_BUILTIN(implementations, "grouped_matmul/vulkan") {
  for (Mode mode : {Mode::gmm, Mode::tgmm}) r.add(std::make_shared<VulkanGroupedMatmul>(mode));
}

}  // namespace ejk::kernels::grouped_matmul
