// The decode engine on Vulkan: decode_attention.glsl's two passes; the "16" modules read and
// write f16/bf16 through 16-bit storage, the others only f32 (devices without 16-bit storage
// still run f32). Geometry is specialization constants (one pipeline per threads, block_k,
// rows, head_dim class); dtype, sizes and options are push constants.
#include <algorithm>
#include <memory>
#include <string>

#include "backends/vulkan/vulkan_device.hpp"
#include "common/builtin.hpp"
#include "decode_attention/engine.hpp"
#include "decode_attention/impls.hpp"
#include "ejk/error.hpp"

namespace ejk::kernels::decode_attention {
namespace {


// Mirrors the shader's push-constant block.
struct Push {
  std::uint32_t dtype, sinks_dtype, flags, num_seqs;
  std::uint32_t tokens, heads, kv_heads, head_dim;
  std::uint32_t block_size, max_blocks, num_blocks, seq_len;
  std::uint32_t splits;
  std::int32_t window;
  float qscale, cap2;
  std::uint32_t group_offset;
};
static_assert(sizeof(Push) == 68, "the shader's block is 17 words");

std::uint32_t u32(std::int64_t v) { return static_cast<std::uint32_t>(v); }

std::int64_t dim_class(std::int64_t d) {
  std::int64_t c = 32;
  while (c < d) c *= 2;
  return c;
}

// Shared memory of pass 1 (the shader's arrays).
std::int64_t shared_bytes(std::int64_t R, std::int64_t bk, std::int64_t dm) {
  return 4 * (R * dm + bk * (2 * dm + 4) + R * (bk + 1) + 5 * R + bk);
}

bool needs16(const Engine& e, std::span<const TensorSpec> args) {
  return e.dtype != DType::f32 || (e.sinks && args[static_cast<std::size_t>(e.at.sinks)].dtype != DType::f32);
}

std::string module(const char* pass, bool wide) {
  return std::string("decode_attention/decode_attention_") + pass + (wide ? "16" : "") + ".spv";
}

class VulkanDecode final : public Implementation {
 public:
  explicit VulkanDecode(Binding b) : b_(std::move(b)) {}
  std::string_view kernel() const override { return b_.kernel; }
  Backend backend() const override { return Backend::vulkan; }
  std::vector<ArgDef> args() const override { return b_.args; }
  std::vector<std::string> sources() const override {
    return {module("partial", false), module("partial", true), module("reduce", false), module("reduce", true)};
  }
  bool supports(const Invocation& inv, const DeviceInfo& dev) const override {
    return !needs16(b_.engine(inv), inv.args) || vulkan::physical_device(dev.index).storage16;
  }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    const Engine e = b_.engine(inv);
    const std::string R = e.varlen ? "(group * block_q)" : "group";
    const auto& lim = vulkan::physical_device(dev.index).limits;
    ParamSpace s;
    s.param("splits", {1, 2, 4, 8, 16, 32}).param("block_k", {16, 32, 64}).param("threads", {64, 128, 256});
    if (e.varlen) s.param("block_q", {1, 2, 4, 8});
    s.constraint("splits == 1 || splits * block_k <= max_keys")
        .constraint("threads <= max_workgroup_size && threads <= max_workgroup_x")
        .constraint("4 * (" + R + " * head_dim_class + block_k * (2 * head_dim_class + 4) + " + R + " * (block_k + 1) + 5 * " +
                    R + " + block_k) <= local_mem")
        // Every invocation takes part in staging a key tile's addresses.
        .constraint("block_k <= threads")
        // Accumulators per invocation stay in registers (and lavapipe compiles in seconds).
        .constraint(R + " * head_dim_class <= 16 * threads")
        .bind(vars(e))
        .bind(device_vars(dev))
        .bind({{"head_dim_class", dim_class(e.head_dim)}, {"max_workgroup_x", std::int64_t{lim.maxComputeWorkGroupSize[0]}}});
    return s;
  }

  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    const Engine e = b_.engine(inv);
    const bool cpu = vulkan::physical_device(dev.index).cpu;
    const std::int64_t bq = query_block(e);
    // GPUs: 128 invocations and 32-key tiles; about 6 such workgroups (36 KB of shared memory
    // each at head_dim 128) are resident per SM, and splits give two waves of them, so that the
    // last wave's tail costs little. CPU implementations (lavapipe) run a workgroup as a loop
    // over SIMD lanes: 64 invocations, two workgroups per core.
    const std::int64_t threads = heuristic_threads(e, bq, cpu ? 64 : 128), bk = 32;
    const std::int64_t parallel = std::max<std::int64_t>(1, dev.compute_units) * (cpu ? 1 : 6);
    Config c{{"splits", heuristic_splits(e, bq, bk, parallel)}, {"block_k", bk}, {"threads", threads}};
    if (e.varlen) c.set("block_q", bq);
    ParamSpace space = this->space(inv, dev);
    if (space.admits(c)) return c;
    for (std::int64_t k : {16, 32, 64})
      for (std::int64_t t : {128, 64, 256}) {
        Config d = c;
        d.set("block_k", k).set("threads", t);
        if (space.admits(d)) return d;
      }
    auto all = space.enumerate();
    if (all.empty()) throw SelectionError(b_.kernel + " vulkan: no config fits " + dev.id() + " for " + inv.signature());
    return all.front();
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Engine e = b_.engine(inv);
    auto& dev = vulkan::vulkan_device(device);
    const std::string text = b_.kernel + " vulkan: config " + config.canonical() + " ";
    const bool need16 = needs16(e, inv.args);
    if (need16 && !dev.physical().storage16)
      throw InvalidArgument(b_.kernel + " vulkan: " + dev.info().id() + " has no 16-bit storage buffers for f16/bf16 arrays");
    const std::int64_t splits = config.get("splits"), bk = config.get("block_k"), threads = config.get("threads");
    const std::int64_t bq = e.varlen ? config.get("block_q") : 1;
    if (splits <= 0 || bk <= 0 || threads < bk || bq <= 0)
      throw InvalidArgument(text + "needs positive splits, block_k, block_q and threads >= block_k");
    const std::int64_t R = rows(e, bq), dm = dim_class(e.head_dim);
    const std::int64_t shared = shared_bytes(R, bk, dm);
    if (shared > static_cast<std::int64_t>(dev.info().local_mem))
      throw InvalidArgument(text + "needs " + std::to_string(shared) + " bytes of shared memory, the device has " +
                            std::to_string(dev.info().local_mem));
    const double limit = 2147483647.0;
    const double big = static_cast<double>(std::max(e.tokens * e.heads * splits, e.num_blocks * e.block_size * e.kv_heads)) *
                       static_cast<double>(e.head_dim);
    if (big > limit || static_cast<double>(e.num_seqs) * static_cast<double>(e.capacity()) * static_cast<double>(e.kv_heads) *
                               static_cast<double>(e.head_dim) > limit)
      throw InvalidArgument(b_.kernel + " vulkan: arrays of more than 2^31 elements are not supported");
    const bool wide = need16 || dev.physical().storage16;

    const std::int64_t parts = std::max<std::int64_t>(1, e.tokens * e.heads * splits);
    auto acc = dev.scratch(static_cast<std::size_t>(parts * e.head_dim) * 4);
    auto ml = dev.scratch(static_cast<std::size_t>(parts) * 8);
    auto arg = [&](int slot) -> const Buffer* { return &arg_at(e, args, slot).buffer(); };
    Push push{};
    push.dtype = u32(dtype_code(e.dtype));
    push.sinks_dtype = e.sinks ? u32(dtype_code(args[static_cast<std::size_t>(e.at.sinks)].dtype())) : 0u;
    push.flags = u32(flags(e));
    push.num_seqs = u32(e.num_seqs);
    push.tokens = u32(e.tokens);
    push.heads = u32(e.heads);
    push.kv_heads = u32(e.kv_heads);
    push.head_dim = u32(e.head_dim);
    push.block_size = u32(std::max<std::int64_t>(1, e.block_size));
    push.max_blocks = u32(e.max_blocks);
    push.num_blocks = u32(e.num_blocks);
    push.seq_len = u32(e.seq_len);
    push.splits = u32(splits);
    push.window = static_cast<std::int32_t>(e.window);
    const LogitScales z = logit_scales(e);
    push.qscale = z.qscale;
    push.cap2 = z.cap2;

    vulkan::Launch l;
    for (int slot : {e.at.q, e.at.k, e.at.v, e.at.block_tables, e.at.kv_begin, e.at.kv_end, e.at.q_loc, e.at.sinks, e.at.out})
      l.buffers.push_back(arg(slot));
    l.buffers.push_back(acc.get());
    l.buffers.push_back(ml.get());
    const auto& lim = dev.physical().limits;
    // Workgroups along one dimension, dispatched in pieces of at most `most` with the offset pushed.
    auto dispatch = [&](std::int64_t gx, std::int64_t gy, std::int64_t n, bool along_z, std::uint32_t most) {
      for (std::int64_t off = 0; off < n; off += most) {
        push.group_offset = u32(off);
        const std::uint32_t cnt = u32(std::min<std::int64_t>(n - off, most));
        l.groups = along_z ? std::array<std::uint32_t, 3>{u32(gx), u32(gy), cnt} : std::array<std::uint32_t, 3>{u32(gx), cnt, 1};
        l.push = vulkan::push_bytes(push);
        dev.dispatch(l);
      }
    };
    const std::int64_t blocks = query_blocks(e, bq);
    std::string spirv = module("partial", wide);
    l.spirv = spirv;
    l.local_size = {u32(threads), 1, 1};
    l.spec = {u32(threads), u32(bk), u32(R), u32(bq), u32(dm)};
    l.shared_bytes = u32(shared);
    if (blocks > 0 && e.num_seqs > 0) dispatch(splits, e.kv_heads, blocks, true, lim.maxComputeWorkGroupCount[2]);

    const std::int64_t dlocal = std::min<std::int64_t>(dm, 64);
    spirv = module("reduce", wide);
    l.spirv = spirv;
    l.local_size = {u32(dlocal), 1, 1};
    l.spec = {u32(dlocal), 1, 1, 1, u32(dm)};
    l.shared_bytes = 0;
    if (e.tokens > 0) dispatch((e.head_dim + dlocal - 1) / dlocal, 0, e.tokens * e.heads, false, lim.maxComputeWorkGroupCount[1]);
  }

 private:
  Binding b_;
};

}  // namespace

// One implementation for every kernel the engine runs.
EJK_BUILTIN(implementations, "decode_attention/vulkan") {
  for (Binding b : clients()) r.add(std::make_shared<VulkanDecode>(std::move(b)));
}

}  // namespace ejk::kernels::decode_attention
