// The decode engine on Vulkan: decode_attention.glsl's passes. Pass 1 is decode_attention_partial
// (the tile pass; "16" reads f16/bf16 through 16-bit storage, the plain module only f32, for
// devices without it), decode_attention_stream (config stream = 1: every dtype read as 16-byte
// words) or decode_attention_coopmat (stream = 2: tensor cores, f16 caches, each subgroup its own
// split); pass 2 is decode_attention_reduce[16]. Geometry is specialization constants (one
// pipeline per threads, block_k, rows, head_dim class; the stream passes add the layout, the
// scalar one the dtype and whether head_dim is a multiple of 8); sizes and options are push
// constants.
#include <algorithm>
#include <bit>
#include <memory>
#include <string>

#include "backends/vulkan/vulkan_device.hpp"
#include "common/builtin.hpp"
#include "common/vulkan_coopmat.hpp"
#include "common/vulkan_fragment_rows.hpp"
#include "decode_attention/engine.hpp"
#include "decode_attention/impls.hpp"
#include "ejk/error.hpp"
#include "ejk/expr.hpp"

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

// Shared memory of pass 1 in bytes (the shader's arrays) for `rows` query rows: the tile pass's
// (query rows, key and value tiles, scores, row state, key addresses), the stream pass's, or the
// cooperative-matrix pass's (the queries and per subgroup of 32 its tile of keys and values, as
// f16; the rows' key bounds).
std::string shared_expr(const std::string& rows) {
  const std::string tile = "4 * (" + rows + " * head_dim_class + block_k * (2 * head_dim_class + 4) + " + rows +
                           " * (block_k + 1) + 5 * " + rows + " + block_k)";
  const std::string coop = "32 * (head_dim_class + 8) + threads / 32 * 64 * (head_dim_class + 8) + 8 * " + rows;
  return "(stream == 0) * (" + tile + ") + (stream == 1) * (" + stream_shared(rows) + ") + (stream == 2) * (" + coop + ")";
}

// The cooperative-matrix pass (stream 2): f16 arrays, head_dim 32, 64 or 128, tiles of 16 keys
// within a page (block_size a multiple of 16) or a contiguous cache of 16 keys at least, full
// subgroups of 32 with 16x16x16 f16 -> f32 fragments whose rows the probe placed (the softmax
// runs in registers). Rows (at most 16) are the space's.
bool coop_offered(const Engine& e, const DeviceInfo& dev) {
  const bool tiles = e.layout == Layout::paged ? e.block_size % 16 == 0 : e.seq_len >= 16;
  return e.dtype == DType::f16 && e.head_dim == dim_class(e.head_dim) && e.head_dim <= 128 && tiles &&
         f16_fragments(dev, {32}) && fragment_rows(dev).lanes > 0;
}

std::string rows_expr(const Engine& e) { return e.varlen ? "(group * block_q)" : "group"; }

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
    std::vector<std::string> s{module("partial", false), module("partial", true), module("stream", false),
                               module("reduce", false), module("reduce", true)};
#ifdef EJK_HAVE_COOPMAT
    s.push_back(module("coopmat", false));
#endif
    return s;
  }
  bool supports(const Invocation& inv, const DeviceInfo& dev) const override {
    return !needs16(b_.engine(inv), inv.args) || vulkan::physical_device(dev.index).storage16;
  }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    const Engine e = b_.engine(inv);
    const std::string R = rows_expr(e);
    const auto& lim = vulkan::physical_device(dev.index).limits;
    ParamSpace s;
    // stream: pass 1 as the tile pass (0), the stream pass (1) or the cooperative-matrix pass (2,
    // threads / 32 subgroups, each its own split of the workgroup's); block_k sets the keys of a
    // tile (16 for the cooperative-matrix pass).
    const bool coop = coop_offered(e, dev);
    s.param("splits", {1, 2, 4, 8, 16, 32})
        .param("block_k", {8, 16, 32, 64})
        .param("threads", {64, 128, 256})
        .param("stream", coop ? std::vector<Value>{0, 1, 2} : std::vector<Value>{0, 1});
    if (e.varlen) s.param("block_q", {1, 2, 4, 8});
    s.constraint("splits == 1 || splits * block_k <= max_keys")
        .constraint("threads <= max_workgroup_size && threads <= max_workgroup_x")
        .constraint(shared_expr(R) + " <= local_mem")
        // The tile pass: every invocation takes part in staging a key tile's addresses, and
        // accumulators per invocation stay in registers (and lavapipe compiles in seconds).
        .constraint("stream != 0 || (block_k >= 16 && block_k <= threads && " + R + " * head_dim_class <= 16 * threads)")
        .constraint("stream != 1 || (" + stream_constraint(R) + ")")
        .constraint("stream != 2 || (block_k == 16 && " + R + " <= 16)")
        .bind(vars(e))
        .bind(device_vars(dev))
        .bind({{"head_dim_class", dim_class(e.head_dim)}, {"max_workgroup_x", std::int64_t{lim.maxComputeWorkGroupSize[0]}}});
    return s;
  }

  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    const Engine e = b_.engine(inv);
    const bool cpu = vulkan::physical_device(dev.index).cpu;
    const std::int64_t bq = query_block(e);
    const std::int64_t units = std::max<std::int64_t>(1, dev.compute_units);
    ParamSpace space = this->space(inv, dev);
    if (coop_offered(e, dev))
      for (std::int64_t t : {128, 64}) {
        // Tensor cores where offered: 4 subgroups a workgroup, each streaming its own part, and
        // splits while there are fewer workgroups than compute units (4 to 8 subgroups each; the
        // pass's ~220 registers let 8 share an H200's multiprocessor). At B32 H32/8 ctx 4096 that
        // is one split: 2 to 16 ran 4-60% slower in a tune (bench/results/h200-2026-11-28f/).
        Config c{{"splits", heuristic_splits(e, bq, 16 * t / 32, units * 64 / t)}, {"block_k", 16}, {"threads", t}, {"stream", 2}};
        if (e.varlen) c.set("block_q", bq);
        if (space.admits(c)) return c;
      }
    // The stream pass with OpenCL's GPU choices (decode_attention.md): 64 invocations with four
    // keys each, splits for about two waves of ~8 groups per compute unit. On lavapipe too: it
    // took a half to a third of the tile pass's time there (f16 and f32, head_dim 64 and 128,
    // windows, ragged queries), and these splits (one or two a core) were the best measured.
    if (const auto c = stream_heuristic(e, space, bq, {64, 128, 256}, units * 4)) return *c;
    // The tile pass where no stream config fits (more query rows than its registers hold):
    // 32-key tiles; on GPUs 128 invocations, about 6 workgroups (36 KB of shared memory each at
    // head_dim 128) resident per SM and splits for two waves of them. CPU implementations
    // (lavapipe) run a workgroup as a loop over SIMD lanes: 64 invocations, two workgroups per
    // core.
    const std::int64_t threads = heuristic_threads(e, bq, cpu ? 64 : 128), bk = 32;
    const std::int64_t parallel = units * (cpu ? 1 : 6);
    Config c{{"splits", heuristic_splits(e, bq, bk, parallel)}, {"block_k", bk}, {"threads", threads}, {"stream", 0}};
    if (e.varlen) c.set("block_q", bq);
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
    const std::int64_t bq = e.varlen ? config.get("block_q") : 1, stream = config.get("stream");
    const std::int64_t R = rows(e, bq), dm = dim_class(e.head_dim);
    if (splits <= 0 || bk <= 0 || threads <= 0 || bq <= 0 || stream < 0 || stream > 2)
      throw InvalidArgument(text + "needs positive values and stream 0, 1 or 2");
    if (stream == 0 && threads < bk) throw InvalidArgument(text + "needs threads >= block_k");
    if (stream == 1 && !stream_fits(bk, dm, threads))
      throw InvalidArgument(text + "needs whole 8-element slices per invocation and at least one key each (stream)");
    if (stream == 2 && (!coop_offered(e, dev.info()) || bk != 16 || threads % 32 != 0 || R > 16))
      throw InvalidArgument(text + "(stream 2) needs 16x16x16 f16 cooperative matrices with full subgroups of 32, an f16 "
                                   "cache, head_dim 32, 64 or 128, pages of a multiple of 16 keys (or a contiguous cache "
                                   "of 16 at least), block_k 16, threads a multiple of 32 and at most 16 query rows");
    Vars at = vars(e);
    at.insert({{"block_q", bq}, {"block_k", bk}, {"threads", threads}, {"stream", stream}, {"head_dim_class", dm}});
    const std::int64_t shared = Expr::parse(shared_expr(rows_expr(e))).eval(at);
    if (shared > static_cast<std::int64_t>(dev.info().local_mem))
      throw InvalidArgument(text + "needs " + std::to_string(shared) + " bytes of shared memory, the device has " +
                            std::to_string(dev.info().local_mem));
    // The cooperative-matrix pass writes a part for every subgroup of every split.
    const std::int64_t parts_per_row = stream == 2 ? splits * (threads / 32) : splits;
    const double limit = 2147483647.0;
    const double big = static_cast<double>(std::max(e.tokens * e.heads * parts_per_row, e.num_blocks * e.block_size * e.kv_heads)) *
                       static_cast<double>(e.head_dim);
    if (big > limit || static_cast<double>(e.num_seqs) * static_cast<double>(e.capacity()) * static_cast<double>(e.kv_heads) *
                               static_cast<double>(e.head_dim) > limit)
      throw InvalidArgument(b_.kernel + " vulkan: arrays of more than 2^31 elements are not supported");
    const bool wide = need16 || dev.physical().storage16;

    const std::int64_t parts = std::max<std::int64_t>(1, e.tokens * e.heads * parts_per_row);
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
    push.splits = u32(parts_per_row);
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
    std::string spirv = stream == 2 ? module("coopmat", false) : stream == 1 ? module("stream", false) : module("partial", wide);
    l.spirv = spirv;
    l.local_size = {u32(threads), 1, 1};
    l.spec = {u32(threads), u32(bk), u32(R), u32(bq), u32(dm)};
    if (stream) {
      // log2 of a paged cache's page size where it is a power of two, else 32 (the shader divides).
      std::uint32_t page_log2 = 32;
      if (e.layout == Layout::paged && std::has_single_bit(static_cast<std::uint64_t>(e.block_size)))
        page_log2 = u32(std::countr_zero(static_cast<std::uint64_t>(e.block_size)));
      if (stream == 1)
        l.spec.insert(l.spec.end(),
                      {u32(dtype_code(e.dtype)), u32(e.layout == Layout::paged), u32(e.head_dim % 8 == 0), page_log2});
      else {
        const FragmentRows fr = fragment_rows(dev.info());
        l.spec.insert(l.spec.end(), {32u, u32(e.layout == Layout::paged), 0u, page_log2, fr.lanes, fr.first_lo, fr.first_hi});
      }
    }
    l.full_subgroups = stream == 2;
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
