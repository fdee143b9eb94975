// add on Vulkan: add.glsl, the plan of space.hpp (one group per threads * vec elements). The
// "16" module reads and writes any mix of f32, f16 and bf16 through 16-bit storage; the other
// only f32, so devices without 16-bit storage still add f32.
#include <algorithm>
#include <memory>
#include <string>

#include "add/space.hpp"
#include "backends/vulkan/vulkan_device.hpp"
#include "common/builtin.hpp"
#include "common/dtype_code.hpp"
#include "common/vulkan_grid.hpp"
#include "ejk/error.hpp"

namespace ejk::kernels::add {
namespace {

// Mirrors the shader's push-constant block.
struct Push {
  std::uint32_t n, groups_x, a_dtype, b_dtype, out_dtype;
  float alpha;
};

std::uint32_t u32(std::int64_t v) { return static_cast<std::uint32_t>(v); }
bool wide(const Invocation& inv) {
  return inv.args.size() == arg::count && std::any_of(inv.args.begin(), inv.args.end(), [](const TensorSpec& s) {
           return s.dtype != DType::f32;
         });
}

class VulkanAdd final : public Implementation {
 public:
  std::string_view kernel() const override { return kernel_.name(); }
  Backend backend() const override { return Backend::vulkan; }
  std::vector<ArgDef> args() const override { return kernel_.args(); }
  std::vector<std::string> sources() const override { return {"add/add.spv", "add/add16.spv"}; }

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
    const std::string where = "add vulkan";
    check_config(where, config);
    auto& dev = vulkan::vulkan_device(device);
    if (wide(inv) && !dev.physical().storage16)
      throw InvalidArgument(where + ": " + dev.info().id() + " has no 16-bit storage buffers for f16/bf16 a, b or out");
    if (p.numel == 0) return;
    const std::int64_t threads = config.get("threads"), vec = config.get("vec"), n_groups = groups(p.numel, config);
    const auto [gx, gy] = grid_2d(dev, n_groups, where);
    const Push push{u32(p.numel), u32(gx), u32(dtype_code(p.a_dtype)), u32(dtype_code(p.b_dtype)),
                    u32(dtype_code(p.out_dtype)), static_cast<float>(p.alpha)};
    vulkan::Launch l;
    l.spirv = wide(inv) ? "add/add16.spv" : "add/add.spv";
    l.local_size = {u32(threads), 1, 1};
    l.spec = {u32(vec)};
    l.push = vulkan::push_bytes(push);
    l.groups = {u32(gx), u32(gy), 1};
    l.buffers = {&args[arg::a].buffer(), &args[arg::b].buffer(), &args[arg::out].buffer()};
    dev.dispatch(l);
  }

 private:
  AddKernel kernel_;
};

}  // namespace

EJK_BUILTIN(implementations, "add/vulkan") { r.add(std::make_shared<VulkanAdd>()); }

}  // namespace ejk::kernels::add
