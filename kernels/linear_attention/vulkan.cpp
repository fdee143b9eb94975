// The linear-attention kernels on Vulkan: the passes of plan.hpp, each one dispatch of
// linear_attention.glsl's la_token (recurrent) or la_chunk (gla, lightning_attention) with one
// group per (slice of block_v value columns, head, sequence), then (backward) la_gates with one
// group per (head, sequence); the device puts a barrier between dispatches. "16" modules read
// and write f16/bf16 through 16-bit storage; the others only f32, so devices without 16-bit
// storage still run f32. Widths, tiles and which per-channel gates exist are specialization
// constants; the rest are push constants.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/vulkan/vulkan_device.hpp"
#include "common/builtin.hpp"
#include "common/dtype_code.hpp"
#include "ejk/error.hpp"
#include "linear_attention/linear_attention.hpp"
#include "linear_attention/plan.hpp"
#include "linear_attention/spaces.hpp"

namespace ejk::kernels::linear_attention {
namespace {

// Mirror the shaders' push-constant blocks.
struct EnginePush {
  std::uint32_t heads, seq, varlen, dtype;
  std::uint32_t out_f32, fin_f32, has_g, has_gamma;
  std::uint32_t has_init, has_fin, transposed, reverse;
  std::int32_t shift;
  float out_scale, kv_scale;
};
struct GatesPush {
  std::uint32_t heads, seq, varlen, dtype;
  std::uint32_t has_g, has_gamma, has_gk, has_gv;
  std::uint32_t has_ht, has_h0, reverse;
};

std::uint32_t u32(std::int64_t v) { return static_cast<std::uint32_t>(v); }

class VulkanLinearAttention final : public Implementation {
 public:
  VulkanLinearAttention(Variant v, bool backward) : variant_(v), backward_(backward) {}
  std::string_view kernel() const override { return kernel_name(variant_, backward_); }
  Backend backend() const override { return Backend::vulkan; }
  std::vector<ArgDef> args() const override { return kernel_args(variant_, backward_); }
  std::vector<std::string> sources() const override {
    return {"linear_attention/la_token.spv", "linear_attention/la_token16.spv", "linear_attention/la_chunk.spv",
            "linear_attention/la_chunk16.spv", "linear_attention/la_gates.spv", "linear_attention/la_gates16.spv"};
  }

  // 16-bit dtypes need 16-bit storage buffers.
  bool supports(const Invocation& inv, const DeviceInfo& dev) const override {
    if (inv.args.empty() || inv.args[0].dtype == DType::f32) return true;
    return vulkan::physical_device(dev.index).storage16;
  }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    return device_space(variant_, backward_, inv, dev);
  }
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    return device_heuristic(variant_, backward_, inv, dev, dev.discrete);
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    auto& dev = vulkan::vulkan_device(device);
    const bool wide = p.dtype != DType::f32;
    if (wide && !dev.physical().storage16)
      throw InvalidArgument(std::string(kernel()) + " vulkan: " + dev.info().id() + " has no 16-bit storage buffers for " +
                            std::string(to_string(p.dtype)));
    const Tiles tiles = tiles_of(variant_, config);
    if (p.batch == 0 || p.num_seqs == 0) return;
    const auto& lim = dev.physical().limits;
    if (p.num_seqs > lim.maxComputeWorkGroupCount[2] || p.heads > lim.maxComputeWorkGroupCount[1])
      throw InvalidArgument(std::string(kernel()) + " vulkan: " + std::to_string(p.num_seqs) + " sequences and " +
                            std::to_string(p.heads) + " heads exceed the workgroup counts of " + dev.info().id());

    std::vector<const Tensor*> full(p.backward ? bwd::count : fwd::count, nullptr);
    for (std::size_t i = 0; i < args.size(); ++i) full[p.full_index(i)] = &args[i];
    const Buffer* any = &args[0].buffer();
    auto buf = [&](std::size_t i) -> const Buffer* {
      const Tensor* t = full[i];
      return t && !is_absent(t->spec()) ? &t->buffer() : any;
    };
    const Buffer* slot[static_cast<int>(Slot::ds032) + 1] = {};
    auto at = [&](Slot s) -> const Buffer*& { return slot[static_cast<int>(s)]; };
    at(Slot::none) = any;
    at(Slot::q) = buf(fwd::q);
    at(Slot::k) = buf(fwd::k);
    at(Slot::v) = buf(fwd::v);
    at(Slot::gk) = buf(fwd::gk);
    at(Slot::gv) = buf(fwd::gv);
    at(Slot::h0) = buf(fwd::initial_state);
    std::shared_ptr<Buffer> gamma_buf;
    const Buffer* gamma = buf(fwd::g_gamma);
    if (p.variant == Variant::lightning) {
      const auto bytes = encode(p.dtype, p.gamma({}));
      gamma_buf = dev.scratch(bytes.size());
      dev.write(*gamma_buf, 0, bytes.data(), bytes.size());
      gamma = gamma_buf.get();
    }
    std::vector<std::shared_ptr<Buffer>> scratch;
    auto f32 = [&](Slot s, std::int64_t n) {
      scratch.push_back(dev.scratch(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) * 4));
      at(s) = scratch.back().get();
    };
    const std::int64_t TH = p.tokens() * p.heads, states = p.num_seqs * p.heads * p.K * p.V;
    for (Slot s : {Slot::dout, Slot::ht, Slot::o, Slot::final_state, Slot::o32, Slot::dq32, Slot::dk32, Slot::dv32,
                   Slot::st32, Slot::ds032})
      at(s) = any;
    if (!p.backward) {
      at(Slot::o) = buf(fwd::o);
      at(Slot::final_state) = buf(fwd::final_state);
    } else {
      at(Slot::dout) = buf(bwd::dout);
      at(Slot::ht) = buf(bwd::dht);
      f32(Slot::dq32, TH * p.K);
      f32(Slot::dk32, TH * p.K);
      f32(Slot::dv32, TH * p.V);
      if (p.has_gv) f32(Slot::o32, TH * p.V);
      if (p.has_ht) f32(Slot::st32, states);
      if (p.has_h0) f32(Slot::ds032, states);
    }
    const std::string suffix = wide ? "16.spv" : ".spv";
    const auto dtype = static_cast<std::uint32_t>(dtype_code(p.dtype));
    const Buffer* cu = buf(fwd::cu_seqlens);

    for (const Pass& ps : plan(p)) {
      const std::int64_t threads = tiles.threads(ps.R);
      const bool rg = ps.row_gate != Slot::none, cg = ps.col_gate != Slot::none;
      const EnginePush push{u32(p.heads), u32(p.seq), p.varlen ? 1u : 0u, dtype,
                            is_scratch(ps.out) ? 1u : 0u, is_scratch(ps.final) ? 1u : 0u, p.has_g ? 1u : 0u,
                            p.has_gamma ? 1u : 0u, ps.init != Slot::none ? 1u : 0u, ps.final != Slot::none ? 1u : 0u,
                            ps.transposed ? 1u : 0u, ps.reverse ? 1u : 0u, ps.shift,
                            static_cast<float>(ps.out_scale), static_cast<float>(ps.kv_scale)};
      const std::string module = std::string("linear_attention/") + (tiles.chunk ? "la_chunk" : "la_token") + suffix;
      vulkan::Launch l;
      l.spirv = module;
      l.local_size = {u32(threads), 1, 1};
      l.spec = {u32(ps.R), u32(ps.C), u32(tiles.block_v), u32(tiles.chunk ? tiles.chunk : tiles.k_split), rg ? 1u : 0u,
                cg ? 1u : 0u};
      l.push = vulkan::push_bytes(push);
      l.buffers = {at(ps.query), at(ps.key),  at(ps.value), buf(fwd::g), gamma, at(ps.row_gate), at(ps.col_gate),
                   at(ps.init),  cu,          at(ps.out),   at(ps.final)};
      l.groups = {u32((ps.C + tiles.block_v - 1) / tiles.block_v), u32(p.heads), u32(p.num_seqs)};
      const std::int64_t R = ps.R, BV = tiles.block_v, CH = tiles.chunk;
      l.shared_bytes = tiles.chunk ? u32((CH * (R + 1) + R * (CH + 1) * (rg ? 2 : 1) + CH * (BV + 1) * (cg ? 2 : 1) +
                                          CH * (CH + 1) + R * (BV + 1) + 2 * CH + 2) * 4)
                                   : u32((3 * R + 2 * BV + threads) * 4);
      dev.dispatch(l);
    }
    if (!p.backward) return;
    const GatesPush push{u32(p.heads), u32(p.seq), p.varlen ? 1u : 0u, dtype, p.has_g ? 1u : 0u, p.has_gamma ? 1u : 0u,
                         p.has_gk ? 1u : 0u, p.has_gv ? 1u : 0u, p.has_ht ? 1u : 0u, p.has_h0 ? 1u : 0u,
                         p.reverse ? 1u : 0u};
    const std::string module = "linear_attention/la_gates" + suffix;
    vulkan::Launch l;
    l.spirv = module;
    l.local_size = {u32(gate_threads), 1, 1};
    l.spec = {u32(p.K), u32(p.V), 16u, 1u, 0u, 0u};
    l.push = vulkan::push_bytes(push);
    l.buffers = {at(Slot::q),    at(Slot::k),    at(Slot::v),    at(Slot::dout), buf(fwd::g),     gamma,
                 at(Slot::gk),   at(Slot::gv),   at(Slot::ht),   cu,             at(Slot::dq32),  at(Slot::dk32),
                 at(Slot::dv32), at(Slot::o32),  at(Slot::st32), at(Slot::ds032), buf(bwd::dq),   buf(bwd::dk),
                 buf(bwd::dv),   buf(bwd::dg),   buf(bwd::dgk),  buf(bwd::dgv),  buf(bwd::dh0)};
    l.groups = {u32(p.heads), u32(p.num_seqs), 1};
    l.shared_bytes = u32((p.K + p.V + gate_threads + 1) * 4);
    dev.dispatch(l);
  }

 private:
  Variant variant_;
  bool backward_;
};

}  // namespace

EJK_BUILTIN(implementations, "linear_attention/vulkan") {
  for (Variant v : variants)
    for (bool backward : {false, true}) r.add(std::make_shared<VulkanLinearAttention>(v, backward));
}

}  // namespace ejk::kernels::linear_attention
