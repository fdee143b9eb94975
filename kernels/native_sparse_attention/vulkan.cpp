// native_sparse_attention and its backward on Vulkan: the passes of nsa.glsl, dispatched in
// order (the device puts a barrier between dispatches), the plan of opencl.cpp:
//   pool      mean of every whole block's keys and values (f32 scratch);
//   fwd       one group per (token, kv head, part of the group's query heads): both branches;
//   bwd_dq    same grid: dg, the rows' deltas, dq;
//   bwd_dcmp  one group per (token, kv head), working where the token lies in a whole block:
//             its share of the pooled row's gradient (the queries at its offset in the block);
//   bwd_clear, bwd_mark  the selection's inverse, a bitmap of the queries listing each block
//             (one module for every dtype);
//   bwd_dkv   one group per (token, kv head), working where a tile of keys starts within its
//             block: the keys' gradients from the queries the bitmap names, in token order,
//             plus the pooled gradient (the block's shares summed in order).
// Every output element has one writer, summed in a fixed order: deterministic (atomicOr sets the
// bitmap's bits, the same bitmap in any order). "16" modules read and write f16/bf16 through
// 16-bit storage.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/vulkan/vulkan_device.hpp"
#include "common/builtin.hpp"
#include "common/dtype_code.hpp"
#include "common/vulkan_grid.hpp"
#include "ejk/error.hpp"
#include "native_sparse_attention/nsa.hpp"
#include "native_sparse_attention/space.hpp"

namespace ejk::kernels::native_sparse_attention {
namespace {

// Mirrors the shader's push-constant block.
struct Push {
  std::uint32_t tokens, nseq, H, G, S, BS, dtype;
  float scale;
  std::uint32_t token0;
};

std::uint32_t u32(std::int64_t v) { return static_cast<std::uint32_t>(v); }

std::vector<std::string> module_keys() {
  std::vector<std::string> r;
  for (const char* pass : {"pool", "fwd", "bwd_dq", "bwd_dcmp", "bwd_dkv"})
    for (const char* suffix : {"", "16"}) r.push_back("native_sparse_attention/nsa_" + std::string(pass) + suffix + ".spv");
  r.push_back("native_sparse_attention/nsa_bwd_clear.spv");
  r.push_back("native_sparse_attention/nsa_bwd_mark.spv");
  return r;
}

struct Setup {
  Problem p;
  std::int64_t threads = 0, tile = 0, hpg = 0;
  Push push{};
  std::string suffix;
};

Setup setup(const Invocation& inv, const Config& config, vulkan::VulkanDevice& dev, const char* kname) {
  Setup s;
  s.p = Problem::of(inv);
  const Problem& p = s.p;
  const bool wide = p.dtype != DType::f32;
  if (wide && !dev.physical().storage16)
    throw InvalidArgument(std::string(kname) + " vulkan: " + dev.info().id() + " has no 16-bit storage buffers for " +
                          std::string(to_string(p.dtype)));
  s.threads = config.get("threads");
  s.tile = config.get("block_n");
  s.hpg = config.get("heads_per_group");
  if (s.threads <= 0 || s.tile <= 0 || s.hpg <= 0 || p.group % s.hpg != 0)
    throw InvalidArgument(std::string(kname) + " vulkan: config " + config.canonical() +
                          " needs positive threads and block_n and heads_per_group dividing the group of " +
                          std::to_string(p.group));
  const auto& lim = dev.physical().limits;
  if (p.kv_heads * p.group > lim.maxComputeWorkGroupCount[1])
    throw InvalidArgument(std::string(kname) + " vulkan: " + std::to_string(p.heads) +
                          " heads exceed the workgroup counts of " + dev.info().id());
  s.push = {u32(p.tokens()), u32(p.num_seqs), u32(p.kv_heads), u32(p.group), u32(p.selected), u32(p.block_size),
            static_cast<std::uint32_t>(dtype_code(p.dtype)), static_cast<float>(p.scale), 0u};
  s.suffix = wide ? "16.spv" : ".spv";
  return s;
}

struct Pooled {
  std::shared_ptr<Buffer> kc, vc;
};

Pooled pool(vulkan::VulkanDevice& dev, const Setup& s, std::span<const Tensor> args) {
  const Problem& p = s.p;
  Pooled r{dev.allocate(static_cast<std::size_t>(std::max<std::int64_t>(1, p.tokens() * p.kv_heads * p.dk)) * 4),
           dev.allocate(static_cast<std::size_t>(std::max<std::int64_t>(1, p.tokens() * p.kv_heads * p.dv)) * 4)};
  const std::string key = "native_sparse_attention/nsa_pool" + s.suffix;
  vulkan::Launch l;
  l.spirv = key;
  l.local_size = {64, 1, 1};
  l.spec = {u32(s.tile), u32(s.hpg), u32(p.dk), u32(p.dv)};
  l.push = vulkan::push_bytes(s.push);
  l.buffers = {&args[fwd::k].buffer(), &args[fwd::v].buffer(), &args[fwd::cu_seqlens].buffer(), r.kc.get(), r.vc.get()};
  const auto [gx, gy] = grid_2d(dev, (p.tokens() * p.kv_heads * (p.dk + p.dv) + 63) / 64, "native_sparse_attention vulkan");
  l.groups = {u32(gx), u32(gy), 1};
  dev.dispatch(l);
  return r;
}

// One group per token along x, in as many dispatches as the device's group count needs.
void dispatch_tokens(vulkan::VulkanDevice& dev, vulkan::Launch& l, Push push, std::int64_t tokens, std::uint32_t y) {
  const std::int64_t most = dev.physical().limits.maxComputeWorkGroupCount[0];
  for (std::int64_t t0 = 0; t0 < tokens; t0 += most) {
    push.token0 = u32(t0);
    l.push = vulkan::push_bytes(push);
    l.groups = {u32(std::min(most, tokens - t0)), y, 1};
    dev.dispatch(l);
  }
}

class VulkanNsa final : public Implementation {
 public:
  std::string_view kernel() const override { return "native_sparse_attention"; }
  Backend backend() const override { return Backend::vulkan; }
  std::vector<ArgDef> args() const override { return forward_args(); }
  std::vector<std::string> sources() const override { return module_keys(); }
  bool supports(const Invocation& inv, const DeviceInfo& dev) const override {
    if (inv.args.empty() || inv.args[0].dtype == DType::f32) return true;
    return vulkan::physical_device(dev.index).storage16;
  }
  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    return gpu_space(NsaKernel().vars(inv), dev, false);
  }
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    return gpu_heuristic(space(inv, dev), Problem::of(inv), dev, "native_sparse_attention vulkan");
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    auto& dev = vulkan::vulkan_device(device);
    const Setup s = setup(inv, config, dev, "native_sparse_attention");
    const Problem& p = s.p;
    if (p.tokens() == 0) return;
    const Pooled pooled = pool(dev, s, args);
    const std::string key = "native_sparse_attention/nsa_fwd" + s.suffix;
    vulkan::Launch l;
    l.spirv = key;
    l.local_size = {u32(s.threads), 1, 1};
    l.spec = {u32(s.tile), u32(s.hpg), u32(p.dk), u32(p.dv)};
    l.push = vulkan::push_bytes(s.push);
    l.buffers = {&args[fwd::q].buffer(),     &args[fwd::k].buffer(),     &args[fwd::v].buffer(),
                 &args[fwd::g_cmp].buffer(), &args[fwd::g_slc].buffer(), &args[fwd::block_indices].buffer(),
                 &args[fwd::block_counts].buffer(), &args[fwd::cu_seqlens].buffer(), pooled.kc.get(),
                 pooled.vc.get(),            &args[fwd::o].buffer(),     &args[fwd::o_cmp].buffer(),
                 &args[fwd::o_slc].buffer(), &args[fwd::lse].buffer()};
    l.shared_bytes = u32((s.hpg * (p.dk + 2 * p.dv + s.tile + 3) + s.tile * (p.dk + p.dv + 2)) * 4);
    dispatch_tokens(dev, l, s.push, p.tokens(), u32(p.kv_heads * (p.group / s.hpg)));
  }
};

class VulkanNsaBwd final : public Implementation {
 public:
  std::string_view kernel() const override { return "native_sparse_attention_bwd"; }
  Backend backend() const override { return Backend::vulkan; }
  std::vector<ArgDef> args() const override { return backward_args(); }
  std::vector<std::string> sources() const override { return module_keys(); }
  bool supports(const Invocation& inv, const DeviceInfo& dev) const override {
    if (inv.args.empty() || inv.args[0].dtype == DType::f32) return true;
    return vulkan::physical_device(dev.index).storage16;
  }
  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    return gpu_space(NsaBwdKernel().vars(inv), dev, true);
  }
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    return gpu_heuristic(space(inv, dev), Problem::of(inv), dev, "native_sparse_attention_bwd vulkan");
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    auto& dev = vulkan::vulkan_device(device);
    const Setup s = setup(inv, config, dev, "native_sparse_attention_bwd");
    const Problem& p = s.p;
    if (p.tokens() == 0) return;
    const Pooled pooled = pool(dev, s, args);
    const std::int64_t N = p.tokens(), H = p.kv_heads, K = p.dk, V = p.dv;
    auto delta = dev.allocate(static_cast<std::size_t>(N * p.heads * 2) * 4);
    auto dkc = dev.allocate(static_cast<std::size_t>(N * H * K) * 4);
    auto dvc = dev.allocate(static_cast<std::size_t>(N * H * V) * 4);
    const std::string dq_key = "native_sparse_attention/nsa_bwd_dq" + s.suffix;
    const std::string dcmp_key = "native_sparse_attention/nsa_bwd_dcmp" + s.suffix;
    const std::string dkv_key = "native_sparse_attention/nsa_bwd_dkv" + s.suffix;
    vulkan::Launch l;
    l.local_size = {u32(s.threads), 1, 1};
    l.spec = {u32(s.tile), u32(s.hpg), u32(K), u32(V)};
    l.push = vulkan::push_bytes(s.push);

    l.spirv = dq_key;
    l.buffers = {&args[bwd::q].buffer(),     &args[bwd::k].buffer(),     &args[bwd::v].buffer(),
                 &args[bwd::g_cmp].buffer(), &args[bwd::g_slc].buffer(), &args[bwd::block_indices].buffer(),
                 &args[bwd::block_counts].buffer(), &args[bwd::cu_seqlens].buffer(), pooled.kc.get(),
                 pooled.vc.get(),            &args[bwd::o_cmp].buffer(), &args[bwd::o_slc].buffer(),
                 &args[bwd::lse].buffer(),   &args[bwd::dout].buffer(),  &args[bwd::dq].buffer(),
                 &args[bwd::dg_cmp].buffer(), &args[bwd::dg_slc].buffer(), delta.get()};
    l.shared_bytes = u32((s.hpg * (2 * K + V + s.tile + 2) + s.tile * (K + V + 2)) * 4);
    dispatch_tokens(dev, l, s.push, N, u32(H * (p.group / s.hpg)));

    l.spirv = dcmp_key;
    l.buffers = {&args[bwd::q].buffer(), &args[bwd::g_cmp].buffer(), &args[bwd::cu_seqlens].buffer(),
                 pooled.kc.get(),        pooled.vc.get(),            &args[bwd::lse].buffer(),
                 &args[bwd::dout].buffer(), delta.get(),             dkc.get(),
                 dvc.get()};
    l.shared_bytes = u32((2 * (K + V) + s.hpg * (K + V + 2)) * 4);
    dispatch_tokens(dev, l, s.push, N, u32(H));

    // The selection's inverse (SelectionBitmap in nsa.hpp), cleared, then a bit set per listed block.
    const SelectionBitmap sel = selection_bitmap(p);
    if (static_cast<std::uint64_t>(sel.words) * 4 > dev.physical().limits.maxStorageBufferRange)
      throw InvalidArgument("native_sparse_attention_bwd vulkan: the selection's inverse for " + std::to_string(N) +
                            " tokens and blocks of " + std::to_string(p.block_size) + " needs " +
                            std::to_string(sel.words * 4) + " bytes, past " + dev.info().id() +
                            "'s storage buffer range");
    auto bitmap = dev.scratch(static_cast<std::size_t>(sel.words) * 4);
    vulkan::Launch m;
    m.local_size = {256, 1, 1};
    m.spec = l.spec;
    m.push = l.push;
    m.spirv = "native_sparse_attention/nsa_bwd_clear.spv";
    m.buffers = {bitmap.get()};
    m.groups = {u32(std::min<std::int64_t>((sel.words + 255) / 256, 65535)), 1, 1};
    dev.dispatch(m);
    m.spirv = "native_sparse_attention/nsa_bwd_mark.spv";
    m.buffers = {&args[bwd::block_indices].buffer(), &args[bwd::block_counts].buffer(), &args[bwd::cu_seqlens].buffer(),
                 bitmap.get()};
    const auto [gx, gy] = grid_2d(dev, (N * H + 255) / 256, "native_sparse_attention_bwd vulkan");
    m.groups = {u32(gx), u32(gy), 1};
    dev.dispatch(m);

    l.spirv = dkv_key;
    l.buffers = {&args[bwd::q].buffer(),   &args[bwd::k].buffer(),  &args[bwd::v].buffer(),
                 &args[bwd::g_slc].buffer(), &args[bwd::block_indices].buffer(), &args[bwd::block_counts].buffer(),
                 &args[bwd::cu_seqlens].buffer(), &args[bwd::lse].buffer(), &args[bwd::dout].buffer(),
                 delta.get(),              dkc.get(),               dvc.get(),
                 &args[bwd::dk].buffer(),  &args[bwd::dv].buffer(), bitmap.get()};
    l.shared_bytes = u32((s.tile * (2 * K + 2 * V + 2) + s.hpg * (K + V + 2 * s.tile)) * 4);
    dispatch_tokens(dev, l, s.push, N, u32(H));
  }
};

}  // namespace

EJK_BUILTIN(implementations, "native_sparse_attention/vulkan") {
  r.add(std::make_shared<VulkanNsa>());
  r.add(std::make_shared<VulkanNsaBwd>());
}

}  // namespace ejk::kernels::native_sparse_attention
