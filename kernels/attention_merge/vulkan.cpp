// attention_merge on Vulkan: attention_merge.glsl, the plan of opencl.cpp (one group per
// rows_per_group rows). The "16" module reads and writes any mix of f32, f16 and bf16 through
// 16-bit storage; the other only f32, so devices without 16-bit storage still merge f32.
#include <memory>
#include <string>

#include "attention_merge/space.hpp"
#include "backends/vulkan/vulkan_device.hpp"
#include "common/builtin.hpp"
#include "common/dtype_code.hpp"
#include "common/vulkan_grid.hpp"
#include "ejk/error.hpp"

namespace ejk::kernels::attention_merge {
namespace {

// Mirrors the shader's push-constant block.
struct Push {
  std::uint32_t rows, seq, heads, dim, rows_per_group, groups_x, out_dtype, part_dtype;
};

std::uint32_t u32(std::int64_t v) { return static_cast<std::uint32_t>(v); }
bool wide(const Invocation& inv) {
  return inv.args.size() == arg::count && (inv.args[arg::out].dtype != DType::f32 || inv.args[arg::part].dtype != DType::f32);
}

class VulkanAttentionMerge final : public Implementation {
 public:
  std::string_view kernel() const override { return kernel_.name(); }
  Backend backend() const override { return Backend::vulkan; }
  std::vector<ArgDef> args() const override { return kernel_.args(); }
  std::vector<std::string> sources() const override {
    return {"attention_merge/attention_merge.spv", "attention_merge/attention_merge16.spv"};
  }

  // 16-bit dtypes need 16-bit storage buffers.
  bool supports(const Invocation& inv, const DeviceInfo& dev) const override {
    return !wide(inv) || vulkan::physical_device(dev.index).storage16;
  }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override { return device_space(inv, dev); }
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    return device_heuristic(inv, dev, dev.discrete);
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    const std::string where = "attention_merge vulkan";
    check_config(where, config, p);
    auto& dev = vulkan::vulkan_device(device);
    if (wide(inv) && !dev.physical().storage16)
      throw InvalidArgument(where + ": " + dev.info().id() + " has no 16-bit storage buffers for f16/bf16 out or part");
    if (p.rows() == 0) return;
    const std::int64_t threads = config.get("threads"), vec = config.get("vec");
    const std::int64_t rpg = rows_per_group(threads, vec, p.head_dim), groups = ceil_div(p.rows(), rpg);
    const auto [gx, gy] = grid_2d(dev, groups, where);
    const Push push{u32(p.rows()), u32(p.seq), u32(p.heads), u32(p.head_dim), u32(rpg), u32(gx),
                    u32(dtype_code(p.out_dtype)), u32(dtype_code(p.part_dtype))};
    const std::string spirv = wide(inv) ? "attention_merge/attention_merge16.spv" : "attention_merge/attention_merge.spv";
    vulkan::Launch l;
    l.spirv = spirv;
    l.local_size = {u32(threads), 1, 1};
    l.spec = {u32(vec)};
    l.push = vulkan::push_bytes(push);
    l.groups = {u32(gx), u32(gy), 1};
    l.buffers = {&args[arg::out].buffer(), &args[arg::lse].buffer(), &args[arg::part].buffer(), &args[arg::part_lse].buffer()};
    l.shared_bytes = u32(threads * vec * 8);
    dev.dispatch(l);
  }

 private:
  AttentionMergeKernel kernel_;
};

}  // namespace

EJK_BUILTIN(implementations, "attention_merge/vulkan") { r.add(std::make_shared<VulkanAttentionMerge>()); }

}  // namespace ejk::kernels::attention_merge
