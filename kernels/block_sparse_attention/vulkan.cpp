// block_sparse_attention on Vulkan. Variants "scalar" and "coopmat" (the forward on NVIDIA
// cooperative matrices) are flash attention's passes walking the layout's lists
// (flash_passes.hpp), where their tiles divide the layout's blocks and the device has 16-bit
// storage; variant "tiles" is the passes of block_sparse_attention.glsl, dispatched in order (the
// device puts a barrier between dispatches):
//   forward   fwd, one group of block_m invocations per (query tile, head, batch);
//   backward  dq (the forward's grid, its own tile dq_block_m x dq_block_n), then dkdv, one
//             group of block_n invocations per (key tile, kv head, batch) walking the
//             transposed lists, block_m queries staged at a time.
// "16" modules read and write f16/bf16 through 16-bit storage; the others only f32. The tile
// sizes and head_dim are specialization constants; everything else is a push constant.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/vulkan/vulkan_device.hpp"
#include "block_sparse_attention/block_sparse_attention.hpp"
#include "block_sparse_attention/tiles.hpp"
#include "common/builtin.hpp"
#include "ejk/error.hpp"
#include "flash_attention/vulkan.hpp"

namespace ejk::kernels::block_sparse_attention {
namespace {

// Mirrors the shader's push-constant block.
struct Push {
  std::int32_t batch, seq_q, seq_k, heads;
  std::int32_t kv_heads, block_q, block_k, nbq;
  std::int32_t nbk, lb, lh;
  std::uint32_t flags, dtype;
  float scale, cap;
};

std::uint32_t u32(std::int64_t v) { return static_cast<std::uint32_t>(v); }

const std::vector<std::string>& modules() {
  static const std::vector<std::string> m = {
      "block_sparse_attention/block_sparse_attention_fwd.spv",  "block_sparse_attention/block_sparse_attention_fwd16.spv",
      "block_sparse_attention/block_sparse_attention_dq.spv",   "block_sparse_attention/block_sparse_attention_dq16.spv",
      "block_sparse_attention/block_sparse_attention_dkdv.spv", "block_sparse_attention/block_sparse_attention_dkdv16.spv",
      "flash_attention/flash_attention_fwd_sparse16.spv",       "flash_attention/flash_attention_dq_sparse16.spv",
      "flash_attention/flash_attention_dkdv_sparse16.spv",      "flash_attention/flash_attention_prep16.spv",
#ifdef EJK_HAVE_COOPMAT
      "flash_attention/flash_attention_fwd_coopmat_sparse.spv", "flash_attention/flash_attention_dkdv_coopmat_sparse.spv",
      "flash_attention/flash_attention_dq_coopmat_sparse.spv",   "common/rows_coopmat.spv",
#endif
  };
  return m;
}

std::string module(const char* pass, const Problem& p) {
  return std::string("block_sparse_attention/block_sparse_attention_") + pass + (p.dtype == DType::f32 ? ".spv" : "16.spv");
}

bool supports16(const Invocation& inv, const DeviceInfo& dev) {
  if (inv.args.empty() || inv.args[0].dtype == DType::f32) return true;
  return vulkan::physical_device(dev.index).storage16;
}

// Throws when a grid of `tiles` groups along x exceeds the device's limit.
void check_tiles(const vulkan::VulkanDevice& dev, std::int64_t tiles, const Problem& p, const char* who) {
  if (tiles > dev.physical().limits.maxComputeWorkGroupCount[0])
    throw InvalidArgument(std::string(who) + " vulkan: " + std::to_string(tiles) + " tiles of seq_q " + std::to_string(p.seq_q) +
                          " / seq_k " + std::to_string(p.seq_k) + " exceed the workgroup count of " + dev.info().id() +
                          "; use a larger tile");
}

ParamSpace space_of(const Invocation& inv, const DeviceInfo& dev, bool backward) {
  const Vars vars = backward ? BlockSparseAttentionBwdKernel().vars(inv) : BlockSparseAttentionKernel().vars(inv);
  const Problem p = Problem::of(inv);
  // flash attention's SPARSE modules read through 16-bit storage only.
  const bool passes = vulkan::physical_device(dev.index).storage16;
  return device_space(backward, vars, dev, [&](ParamSpace& s) {
    if (passes) flash_attention::add_vulkan_params(s, {std::string("tiles")}, flash_problem(p), dev, flash_tile_names);
    else s.param("variant", std::vector<Value>{std::string("tiles")});
  });
}

Config heuristic_of(const Invocation& inv, const DeviceInfo& dev, bool backward) {
  return device_heuristic(space_of(inv, dev, backward), inv, !dev.discrete, backward,
                          flash_attention::vulkan_candidates(dev, backward, flash_tile_names));
}


vulkan::VulkanDevice& checked_device(Device& device, const Problem& p, const char* who) {
  auto& dev = vulkan::vulkan_device(device);
  if (p.dtype != DType::f32 && !dev.physical().storage16)
    throw InvalidArgument(std::string(who) + " vulkan: " + dev.info().id() + " has no 16-bit storage buffers for " +
                          std::string(to_string(p.dtype)));
  const auto& lim = dev.physical().limits;
  if (p.heads > lim.maxComputeWorkGroupCount[1] || p.batch > lim.maxComputeWorkGroupCount[2])
    throw InvalidArgument(std::string(who) + " vulkan: heads " + std::to_string(p.heads) + " and batch " +
                          std::to_string(p.batch) + " exceed the workgroup counts of " + dev.info().id());
  return dev;
}

class VulkanForward final : public Implementation {
 public:
  std::string_view kernel() const override { return "block_sparse_attention"; }
  Backend backend() const override { return Backend::vulkan; }
  std::vector<ArgDef> args() const override { return forward_args(); }
  std::vector<std::string> sources() const override { return modules(); }
  bool supports(const Invocation& inv, const DeviceInfo& dev) const override { return supports16(inv, dev); }
  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override { return space_of(inv, dev, false); }
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override { return heuristic_of(inv, dev, false); }
  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    if (run_passes(p, config, args, device, &flash_attention::vulkan_forward, &flash_attention::vulkan_backward)) return;
    const Tile t = read_tile(p, config, "block_sparse_attention vulkan");
    auto& dev = checked_device(device, p, "block_sparse_attention");
    if (p.batch * p.seq_q == 0) return;
    const Push push = make_params<Push>(p);
    const std::string spirv = module("fwd", p);
    vulkan::Launch l;
    l.spirv = spirv;
    l.local_size = {u32(t.bm), 1, 1};
    l.spec = {u32(t.bm), u32(t.bn), u32(p.head_dim)};
    l.push = vulkan::push_bytes(push);
    for (std::size_t i = 0; i < fwd::count; ++i) l.buffers.push_back(&args[i].buffer());
    check_tiles(dev, (p.seq_q + t.bm - 1) / t.bm, p, "block_sparse_attention");
    l.groups = {u32((p.seq_q + t.bm - 1) / t.bm), u32(p.heads), u32(p.batch)};
    l.shared_bytes = u32((2 * t.bn * p.head_dim + t.bn) * 4);
    dev.dispatch(l);
  }
};

class VulkanBackward final : public Implementation {
 public:
  std::string_view kernel() const override { return "block_sparse_attention_bwd"; }
  Backend backend() const override { return Backend::vulkan; }
  std::vector<ArgDef> args() const override { return backward_args(); }
  std::vector<std::string> sources() const override { return modules(); }
  bool supports(const Invocation& inv, const DeviceInfo& dev) const override { return supports16(inv, dev); }
  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override { return space_of(inv, dev, true); }
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override { return heuristic_of(inv, dev, true); }
  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    if (run_passes(p, config, args, device, &flash_attention::vulkan_forward, &flash_attention::vulkan_backward)) return;
    const Tile t = read_tile(p, config, "block_sparse_attention_bwd vulkan");
    const Tile tq = read_tile(p, config, "block_sparse_attention_bwd vulkan", "dq_");
    auto& dev = checked_device(device, p, "block_sparse_attention_bwd");
    const Push push = make_params<Push>(p);
    vulkan::Launch l;
    l.push = vulkan::push_bytes(push);
    const std::string dq = module("dq", p), dkdv = module("dkdv", p);
    if (p.batch * p.seq_q > 0) {
      l.spirv = dq;
      l.spec = {u32(tq.bm), u32(tq.bn), u32(p.head_dim)};
      l.local_size = {u32(tq.bm), 1, 1};
      l.buffers.clear();
      for (std::size_t i : {bwd::q, bwd::k, bwd::v, bwd::out, bwd::dout, bwd::lse, bwd::kv_block_counts,
                            bwd::kv_block_indices, bwd::q_segment_ids, bwd::kv_segment_ids, bwd::dq})
        l.buffers.push_back(&args[i].buffer());
      check_tiles(dev, (p.seq_q + tq.bm - 1) / tq.bm, p, "block_sparse_attention_bwd");
      l.groups = {u32((p.seq_q + tq.bm - 1) / tq.bm), u32(p.heads), u32(p.batch)};
      l.shared_bytes = u32((2 * tq.bn * p.head_dim + tq.bn) * 4);
      dev.dispatch(l);
    }
    if (p.batch * p.seq_k > 0) {
      l.spirv = dkdv;
      l.spec = {u32(t.bm), u32(t.bn), u32(p.head_dim)};
      l.local_size = {u32(t.bn), 1, 1};
      l.buffers.clear();
      for (std::size_t i : {bwd::q, bwd::k, bwd::v, bwd::out, bwd::dout, bwd::lse, bwd::q_block_counts,
                            bwd::q_block_indices, bwd::q_segment_ids, bwd::kv_segment_ids, bwd::dk, bwd::dv})
        l.buffers.push_back(&args[i].buffer());
      check_tiles(dev, (p.seq_k + t.bn - 1) / t.bn, p, "block_sparse_attention_bwd");
      l.groups = {u32((p.seq_k + t.bn - 1) / t.bn), u32(p.kv_heads), u32(p.batch)};
      l.shared_bytes = u32((2 * t.bm * p.head_dim + 3 * t.bm) * 4);
      dev.dispatch(l);
    }
  }
};

}  // namespace

EJK_BUILTIN(implementations, "block_sparse_attention/vulkan") {
  r.add(std::make_shared<VulkanForward>());
  r.add(std::make_shared<VulkanBackward>());
}

}  // namespace ejk::kernels::block_sparse_attention
