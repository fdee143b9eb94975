// mean_pooling and mean_pooling_bwd on Vulkan: the passes of mean_pooling.glsl, the plan of
// opencl.cpp (one group per block of columns, sequence and part; a finishing pass adds the parts
// of a split forward). "16" modules read and write f16/bf16 through 16-bit storage; the others
// only f32, so devices without 16-bit storage still run f32.
#include <memory>
#include <string>

#include "backends/vulkan/vulkan_device.hpp"
#include "common/builtin.hpp"
#include "common/dtype_code.hpp"
#include "ejk/error.hpp"
#include "mean_pooling/mean_pooling.hpp"
#include "mean_pooling/space.hpp"

namespace ejk::kernels::mean_pooling {
namespace {

// Mirrors the shader's push-constant block.
struct Push {
  std::uint32_t packed, seq, tokens, segs, dim, blocks, splits, dtype;
};

std::uint32_t u32(std::int64_t v) { return static_cast<std::uint32_t>(v); }

class VulkanMeanPooling final : public Implementation {
 public:
  explicit VulkanMeanPooling(Direction dir) : kernel_(dir) {}
  std::string_view kernel() const override { return kernel_.name(); }
  Backend backend() const override { return Backend::vulkan; }
  std::vector<ArgDef> args() const override { return kernel_.args(); }
  std::vector<std::string> sources() const override {
    if (kernel_.name() == "mean_pooling_bwd") return {"mean_pooling/mean_pooling_bwd.spv", "mean_pooling/mean_pooling_bwd16.spv"};
    return {"mean_pooling/mean_pooling_pool.spv", "mean_pooling/mean_pooling_pool16.spv",
            "mean_pooling/mean_pooling_finish.spv", "mean_pooling/mean_pooling_finish16.spv"};
  }

  // 16-bit dtypes need 16-bit storage buffers.
  bool supports(const Invocation& inv, const DeviceInfo& dev) const override {
    if (inv.args.empty() || inv.args[0].dtype == DType::f32) return true;
    return vulkan::physical_device(dev.index).storage16;
  }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override { return device_space(inv, dev); }
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    return device_heuristic(inv, dev, dev.discrete);
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    const std::string where = std::string(kernel()) + " vulkan";
    check_config(where, config);
    auto& dev = vulkan::vulkan_device(device);
    const bool wide = p.dtype != DType::f32;
    if (wide && !dev.physical().storage16)
      throw InvalidArgument(where + ": " + dev.info().id() + " has no 16-bit storage buffers for " + std::string(to_string(p.dtype)));
    if (p.segs == 0 || p.dim == 0) return;
    const std::int64_t threads = config.get("threads"), vec = config.get("vec"), rows = config.get("rows");
    const std::int64_t splits = config.get("splits");
    const std::int64_t blocks = ceil_div(p.dim, threads / rows * vec);
    const auto& lim = dev.physical().limits;
    if (blocks * p.segs > lim.maxComputeWorkGroupCount[0] || splits > lim.maxComputeWorkGroupCount[1])
      throw InvalidArgument(where + ": " + std::to_string(blocks * p.segs) + " groups of columns and sequences exceed the workgroup count of " +
                            dev.info().id());
    const Push push{u32(p.packed), u32(p.seq), u32(p.tokens), u32(p.segs), u32(p.dim), u32(blocks), u32(splits),
                    static_cast<std::uint32_t>(dtype_code(p.dtype))};
    const std::string suffix = wide ? "16.spv" : ".spv";
    vulkan::Launch l;
    l.local_size = {u32(threads), 1, 1};
    l.spec = {u32(vec), u32(rows)};
    l.push = vulkan::push_bytes(push);
    l.groups = {u32(blocks * p.segs), u32(splits), 1};
    if (p.dir == Direction::backward) {
      const std::string spirv = "mean_pooling/mean_pooling_bwd" + suffix;
      l.spirv = spirv;
      l.buffers = {&args[arg::in].buffer(), &args[arg::cu_seqlens].buffer(), &args[arg::out].buffer()};
      dev.dispatch(l);
      return;
    }
    auto partial = dev.scratch(splits > 1 ? static_cast<std::size_t>(splits * p.segs * p.dim) * 4 : 4);
    const std::string pool = "mean_pooling/mean_pooling_pool" + suffix, finish = "mean_pooling/mean_pooling_finish" + suffix;
    l.spirv = pool;
    l.buffers = {&args[arg::in].buffer(), &args[arg::cu_seqlens].buffer(), &args[arg::out].buffer(), partial.get()};
    l.shared_bytes = u32(threads * vec * 4);
    dev.dispatch(l);
    if (splits == 1) return;
    l.spirv = finish;
    l.buffers = {partial.get(), &args[arg::cu_seqlens].buffer(), &args[arg::out].buffer()};
    l.groups = {u32(ceil_div(p.segs * p.dim, threads)), 1, 1};
    l.shared_bytes = 0;
    dev.dispatch(l);
  }

 private:
  MeanPoolingKernel kernel_;
};

}  // namespace

EJK_BUILTIN(implementations, "mean_pooling/vulkan") {
  for (Direction dir : {Direction::forward, Direction::backward}) r.add(std::make_shared<VulkanMeanPooling>(dir));
}

}  // namespace ejk::kernels::mean_pooling
