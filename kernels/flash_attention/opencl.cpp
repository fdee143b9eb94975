// flash_attention and flash_attention_bwd on OpenCL: the scalar tiled design of
// flash_attention.cl (the same as the Vulkan shaders'). Forward: one workgroup per (query block,
// head, sequence), online softmax. Backward, FlashAttention-2 style without atomics: prep (delta
// = dout . out, dsoftmax_aux shares), dk/dv by key block iterating the query blocks (P
// recomputed from lse), dq by query block, then fixed-order reductions for a broadcast dbias and
// for dsoftmax_aux. Options, head_dim and the storage dtypes are kernel arguments; only the tile
// geometry and a head_dim size class are build options, so one program (all five passes) serves
// every invocation of a geometry: CPU drivers such as PoCL take seconds to build each.
// On devices with tensor-core fragments (NVIDIA from sm_80) the `mma` variant runs the forward,
// dk/dv and dq passes of flash_attention_mma.cl instead: f16/bf16 operands on mma.sync through
// inline PTX, the scores in registers.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <memory>
#include <regex>
#include <string>
#include <string_view>

#include "backends/clc/clc_device.hpp"
#include "common/builtin.hpp"
#include "common/ceil_div.hpp"
#include "ejk/error.hpp"
#include "flash_attention/flash_attention.hpp"
#include "flash_attention/opencl.hpp"
#include "flash_attention/program.hpp"

namespace ejk::kernels::flash_attention {
namespace {

constexpr const char* source_key = "flash_attention/flash_attention.cl";
constexpr const char* mma_key = "flash_attention/flash_attention_mma.cl";
constexpr const char* common_key = "flash_attention/flash_attention_common.cl";
constexpr const char* philox_key = "common/philox.h";

// Work-items of the prep and finish passes (the program's PREP_NT), and of the prep pass a row
// (PREP_LANES): its local memory holds prep_threads rows of prep_lanes + 1 partial sums.
constexpr std::int64_t prep_threads = 64, prep_lanes = 16;

// NVIDIA's OpenCL launches at most 256 work-items a group for kernels of this register use
// (measured on an H100 for matmul's); GPUs get no larger groups.
constexpr std::int64_t gpu_max_threads = 256;

std::uint32_t u32(std::int64_t v) { return static_cast<std::uint32_t>(v); }

// The space's limits, for configs that reach run() without it.
TileGeometry geometry(const Config& c, const Problem& p, const DeviceInfo& info) {
  TileGeometry g{c.get("block_q"), c.get("block_k"), c.get("threads_x"), c.get("threads_y"), head_dim_class(p.head_dim)};
  const std::string text = std::string(p.backward ? "flash_attention_bwd" : "flash_attention") + " opencl: config " +
                           c.canonical() + " ";
  if (g.bq <= 0 || g.bk <= 0 || g.rx <= 0 || g.ry <= 0)
    throw InvalidArgument(text + "needs positive block_q, block_k, threads_x, threads_y");
  if (g.bq % g.ry != 0 || g.bk % g.rx != 0 || (p.backward && g.bk % g.ry != 0))
    throw InvalidArgument(text + "needs block_q % threads_y == 0, block_k % threads_x == 0" +
                          (p.backward ? " and block_k % threads_y == 0" : ""));
  if (g.rx * g.ry > info.max_workgroup_size || g.rx > info.max_workgroup_dims[0] || g.ry > info.max_workgroup_dims[1])
    throw InvalidArgument(text + "exceeds the device's workgroup size " + std::to_string(info.max_workgroup_size) +
                          " (" + std::to_string(info.max_workgroup_dims[0]) + " x " +
                          std::to_string(info.max_workgroup_dims[1]) + ")");
  const std::int64_t local = p.backward ? std::max(g.dkdv_bytes(), g.dq_bytes()) : g.forward_bytes();
  if (local > static_cast<std::int64_t>(info.local_mem))
    throw InvalidArgument(text + "needs " + std::to_string(local) + " bytes of local memory for head_dim " +
                          std::to_string(p.head_dim) + ", the device has " + std::to_string(info.local_mem));
  return g;
}

// The tensor-core passes (flash_attention_mma.cl) take f16 or bf16 q, k, v with head_dim a
// multiple of 16 up to 128 (the accumulators of a 16-row tile stay in registers), on devices that
// list m16n8k16 fragments of that type with f32 accumulation (NVIDIA from sm_80, inline PTX).
bool mma_offered(const Problem& p, const DeviceInfo& dev) {
  if ((p.dtype != DType::f16 && p.dtype != DType::bf16) || p.head_dim % 16 != 0 || p.head_dim > 128) return false;
  return dev.offers({16, 8, 16, p.dtype, DType::f32});
}

// An mma config's geometry and its passes' local memory in bytes (flash_attention_mma.cl's
// layouts): warps per workgroup, 16-row tiles per warp (forward), keys per block (forward, dq),
// query rows per block (dk/dv), local buffers of k and v (forward), and whether the forward
// copies them by cp.async into a ring of `stages` (k and v rows as they are, padded by 16 bytes,
// plus 16 bytes to align the ring; one stage: k and v apart) rather than through registers; and whether the backward
// copies its rows the same way (dq: a ring of two stages of k and v; dk/dv: of q and dout rows), none
// transposed.
struct MmaGeometry {
  std::int64_t warps, tiles, bk, bq, d, stages = 1, async = 0, bwd_async = 0, fused = 0;
  // The fused dk/dv pass's local memory as a fixed-size array (0: the local argument), where it
  // exceeds what a local argument gets (DeviceInfo::local_mem) but not static_local().
  std::int64_t dkdv_static = 0;
  std::int64_t row_words() const { return d / 2 + 4; }
  std::int64_t row_bytes() const { return 2 * d + 16; }
  std::int64_t forward_local() const {
    return async ? 16 + stages * 2 * bk * row_bytes() : 4 * stages * (bk * row_words() + d * (bk / 2 + 4));
  }
  std::int64_t dq_local() const {
    return bwd_async ? 16 + 2 * 2 * bk * row_bytes() : 4 * (2 * bk * row_words() + d * (bk / 2 + 4));
  }
  std::int64_t dkdv_local() const {
    // Fused (dq added from dk/dv's pass): the workgroup's k rows and a block's dS^T as well.
    return bwd_async ? 16 + 2 * (2 * bq * row_bytes() + 8 * bq) + fused * 16 * warps * (row_bytes() + 2 * bq + 16)
                     : 4 * (2 * bq * row_words() + 2 * d * (bq / 2 + 4) + 2 * bq);
  }
};

MmaGeometry mma_geometry(const Config& c, const Problem& p, const DeviceInfo& info) {
  // Configs from before pipeline stages (or the async copies) existed have one (none).
  MmaGeometry g{c.get("mma_warps"), p.backward ? 1 : c.get("mma_tiles"), c.get("mma_block_k"),
                p.backward ? c.get("mma_block_q") : 16, p.head_dim,
                !p.backward && c.has("mma_stages") ? c.get("mma_stages") : 1,
                !p.backward && c.has("mma_async") ? c.get("mma_async") : 0,
                p.backward && c.has("mma_async") ? c.get("mma_async") : 0,
                p.backward && c.has("mma_fused") ? c.get("mma_fused") : 0};
  const std::string text = std::string(p.backward ? "flash_attention_bwd" : "flash_attention") + " opencl: config " +
                           c.canonical() + " ";
  if (!mma_offered(p, info))
    throw InvalidArgument(text + "needs f16 or bf16 q, k, v with head_dim a multiple of 16 up to 128 on a device with "
                          "16x8x16 " + std::string(to_string(p.dtype)) + " tensor-core fragments (" + info.id() + ": " +
                          info.name + ")");
  if (g.warps <= 0 || 32 * g.warps > gpu_max_threads || (g.tiles != 1 && g.tiles != 2) ||
      (g.bk != 32 && g.bk != 64 && (p.backward || g.bk != 16)) || (g.bq != 16 && g.bq != 32) ||
      (g.async != 0 && g.async != 1) || (g.bwd_async != 0 && g.bwd_async != 1) || g.stages < 1 ||
      g.stages > 2 + g.async || (g.fused != 0 && (g.fused != 1 || g.bwd_async != 1 || g.d % (16 * g.warps) != 0)))
    throw InvalidArgument(text + "needs 1 to 8 mma_warps, mma_tiles 1 or 2, mma_block_k 32 or 64 (or 16, forward), "
                          "mma_block_q 16 or 32, mma_async 0 or 1, mma_stages 1 or 2 (mma_async 1: up to 3), "
                          "mma_fused 0 or 1 (1: with mma_async 1 and head_dim a multiple of 16 mma_warps)");
  const std::int64_t local =
      p.backward ? std::max(g.fused ? 0 : g.dq_local(), g.dkdv_local()) : g.forward_local();
  // The fused backward's one pass may take a fixed-size array; every other program a local argument.
  const auto limit = static_cast<std::int64_t>(p.backward && g.fused ? info.static_local() : info.local_mem);
  if (local > limit)
    throw InvalidArgument(text + "needs " + std::to_string(local) + " bytes of local memory for head_dim " +
                          std::to_string(p.head_dim) + ", the device has " + std::to_string(limit));
  if (p.backward && g.fused && local > static_cast<std::int64_t>(info.local_mem)) g.dkdv_static = (local + 15) / 16 * 16;
  return g;
}

// The build options of programs that walk block lists (flash_attention_common.cl's SPARSE).
std::string list_options(const BlockLists* lists) {
  if (!lists) return "";
  return " -DSPARSE=1 -DLBQ=" + std::to_string(lists->block_q) + " -DLBK=" + std::to_string(lists->block_k);
}

// Kernel `name` of the mma geometry's program.
std::shared_ptr<clc::Kernel> mma_kernel(clc::Device& dev, const MmaGeometry& g, DType t, const char* name,
                                        const BlockLists* lists = nullptr) {
  const std::string options = "-DD=" + std::to_string(g.d) + " -DNW=" + std::to_string(g.warps) +
                              " -DRT=" + std::to_string(g.tiles) + " -DBK=" + std::to_string(g.bk) +
                              " -DBQ=" + std::to_string(g.bq) + " -DSTAGES=" + std::to_string(g.stages) +
                              " -DMMA_ASYNC=" + std::to_string(g.async) + " -DBWD_ASYNC=" + std::to_string(g.bwd_async) +
                              " -DBWD_FUSED=" + std::to_string(g.fused) + " -DBF16=" + (t == DType::bf16 ? "1" : "0") +
                              (g.fused && vector_red(dev.info()) ? " -DRED_V4=1" : "") +
                              (g.dkdv_static ? " -DDKDV_STATIC=" + std::to_string(g.dkdv_static) : "") + list_options(lists);
  return dev.kernel(mma_key, options, name);
}

// Kernel `name` of the geometry's program.
std::shared_ptr<clc::Kernel> program_kernel(clc::Device& dev, const TileGeometry& g, const char* name,
                                            const BlockLists* lists = nullptr) {
  const std::string options = "-DBQ=" + std::to_string(g.bq) + " -DBK=" + std::to_string(g.bk) +
                              " -DRX=" + std::to_string(g.rx) + " -DRY=" + std::to_string(g.ry) +
                              " -DDMAX=" + std::to_string(g.d) + " -DFMA=" + (dev.hardware_fma() ? "1" : "0") +
                              " -DUNROLL_LOOPS=" + (clc::is_cpu(dev.info()) ? "0" : "1") + list_options(lists);
  return dev.kernel(source_key, options, name);
}

// Launches `groups` (x, y, z) workgroups of `local` work-items with the arguments that follow.
template <class... Args>
void launch(clc::Device& dev, clc::Kernel& k, std::int64_t gx, std::int64_t gy, std::int64_t gz,
            std::int64_t lx, std::int64_t ly, const Args&... args) {
  if (gx <= 0 || gy <= 0 || gz <= 0) return;
  const clc::Range global(static_cast<std::size_t>(gx * lx), static_cast<std::size_t>(gy * ly),
                             static_cast<std::size_t>(gz));
  const clc::Range local(static_cast<std::size_t>(lx), static_cast<std::size_t>(ly), 1);
  dev.launch(k, global, local, args...);
}

// The space's spelling of the program's DS (padded local row stride) and WD (output columns per
// work-item).
const char* const ds_expr = "(((head_dim_class + threads_x - 1) / threads_x) * threads_x + 1)";
const char* const wd_expr = "((head_dim_class + threads_x - 1) / threads_x)";

const char* const scalar_v = "variant == \"scalar\"";
const char* const mma_v = "variant == \"mma\"";

// A config's variant; configs from before variants existed are scalar.
std::string variant_of(const Config& c, const Problem& p) {
  const std::string v = c.has("variant") ? c.text("variant") : "scalar";
  if (v != "scalar" && v != "mma")
    throw InvalidArgument(std::string(p.backward ? "flash_attention_bwd" : "flash_attention") + " opencl: unknown variant '" +
                          v + "' (scalar, mma)");
  return v;
}

clc::Device& device_for(const Problem& p, Device& device) {
  check_32bit_indices(p, p.backward ? "flash_attention_bwd opencl" : "flash_attention opencl");
  return clc::clc_device(device);
}

class OpenCLForward final : public clc::Implementation {
 public:
  using clc::Implementation::Implementation;
  std::string_view kernel() const override { return "flash_attention"; }
  std::vector<ArgDef> args() const override { return forward_args(); }
  std::vector<std::string> sources() const override { return {source_key, mma_key, clc::mma_source, common_key, philox_key, clc::prelude_source}; }
  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    return opencl_space(inv, dev, false, clc::is_cpu(dev));
  }
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    return opencl_heuristic(inv, dev, false, clc::is_cpu(dev));
  }

  void prepare(const Invocation& inv, const Config& config, Device& device) const override {
    const Problem p = Problem::of(inv);
    auto& dev = device_for(p, device);
    if (variant_of(config, p) == "mma") (void)mma_kernel(dev, mma_geometry(config, p, dev.info()), p.dtype, "fa_fwd_mma");
    else (void)program_kernel(dev, geometry(config, p, dev.info()), "fa_fwd");
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    opencl_forward(Problem::of(inv), config, args, device);
  }
};

class OpenCLBackward final : public clc::Implementation {
 public:
  using clc::Implementation::Implementation;
  std::string_view kernel() const override { return "flash_attention_bwd"; }
  std::vector<ArgDef> args() const override { return backward_args(); }
  std::vector<std::string> sources() const override { return {source_key, mma_key, clc::mma_source, common_key, philox_key, clc::prelude_source}; }
  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    return opencl_space(inv, dev, true, clc::is_cpu(dev));
  }
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    return opencl_heuristic(inv, dev, true, clc::is_cpu(dev));
  }

  void prepare(const Invocation& inv, const Config& config, Device& device) const override {
    const Problem p = Problem::of(inv);
    auto& dev = device_for(p, device);
    if (variant_of(config, p) == "mma") {
      (void)program_kernel(dev, TileGeometry{16, 16, 8, 4, head_dim_class(p.head_dim)}, "fa_prep");
      (void)mma_kernel(dev, mma_geometry(config, p, dev.info()), p.dtype, "fa_dkdv_mma");
    } else {
      (void)program_kernel(dev, geometry(config, p, dev.info()), "fa_prep");
    }
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    opencl_backward(Problem::of(inv), config, args, device);
  }
};

}  // namespace

void opencl_forward(const Problem& p, const Config& config, std::span<const Tensor> args, Device& device,
                    const BlockLists* lists) {
  auto& dev = device_for(p, device);
  ProgramOptions params = program_options(p, "flash_attention opencl");
  if (lists) params.flags |= lists->flags();
  auto go = [&](clc::Kernel& k, std::int64_t groups, std::int64_t lx, std::int64_t ly, std::int64_t local) {
    auto with = [&](const auto&... extra) {
      launch(dev, k, groups, p.heads, p.batch, lx, ly, clc::StructArg::of(params),
             clc::LocalBytes{static_cast<std::size_t>(local)}, args[fwd::q], args[fwd::k], args[fwd::v],
             args[fwd::bias], args[fwd::softmax_aux], args[fwd::cu_seqlens_q], args[fwd::cu_seqlens_k],
             args[fwd::q_segment_ids], args[fwd::kv_segment_ids], args[fwd::out], args[fwd::lse], extra...);
    };
    if (lists) with(*lists->kv_counts, *lists->kv_indices);
    else with();
  };
  if (variant_of(config, p) == "mma") {
    const MmaGeometry g = mma_geometry(config, p, dev.info());
    go(*mma_kernel(dev, g, p.dtype, "fa_fwd_mma", lists), ceil_div(p.seq_q, 16 * g.warps * g.tiles), 32 * g.warps, 1,
       g.forward_local());
    return;
  }
  const TileGeometry g = geometry(config, p, dev.info());
  go(*program_kernel(dev, g, "fa_fwd", lists), ceil_div(p.seq_q, g.bq), g.rx, g.ry, g.forward_bytes());
}

void opencl_backward(const Problem& p, const Config& config, std::span<const Tensor> args, Device& device,
                     const BlockLists* lists) {
  auto& dev = device_for(p, device);
  const bool mma = variant_of(config, p) == "mma";
  // The mma variant takes its prep and finish passes from a small scalar geometry's program.
  const TileGeometry g = mma ? TileGeometry{16, 16, 8, 4, head_dim_class(p.head_dim)} : geometry(config, p, dev.info());
  const MmaGeometry mg = mma ? mma_geometry(config, p, dev.info()) : MmaGeometry{};

  // Scratch: delta per row, the prep pass's dsoftmax_aux shares, and where the bias is
  // broadcast, dbias unbroadcast in f32 (summed by the finish pass instead of atomically).
  const std::int64_t prep_blocks = ceil_div(p.seq_q, prep_threads);
  const bool broadcast = p.has_bias && ((p.bias_batch == 1 && p.batch > 1) || (p.bias_heads == 1 && p.heads > 1));
  auto delta = dev.scratch(static_cast<std::size_t>(std::max<std::int64_t>(1, p.heads * p.total_q)) * 4);
  auto parts = dev.scratch(static_cast<std::size_t>(std::max<std::int64_t>(1, p.batch * p.heads * prep_blocks)) * 4);
  auto scratch = dev.scratch(static_cast<std::size_t>(broadcast ? p.batch * p.heads * p.seq_q * p.seq_k : 1) * 4);
  // The fused dk/dv pass adds each block's dq into f32 (atomically), converted once at the end.
  const bool fused = mma && mg.fused;
  auto dq_sum = dev.scratch(static_cast<std::size_t>(fused ? p.total_q * p.heads * p.head_dim : 1) * 4);

  ProgramOptions params = program_options(p, "flash_attention_bwd opencl");
  params.flags |= (broadcast ? program_flag::dbias_scratch : 0u) | (lists ? lists->flags() : 0u);
  params.extra = u32(prep_blocks);
  // Every pass takes the same arguments after the parameters and its local memory; the passes
  // that walk tiles (dk/dv, dq) the lists after them.
  auto pass = [&](const char* name, std::int64_t gx, std::int64_t gy, std::int64_t gz, std::int64_t lx,
                  std::int64_t ly, std::int64_t local) {
    const std::string_view n(name);
    const bool walks = lists && (n.starts_with("fa_dkdv") || n.starts_with("fa_dq"));
    const BlockLists* l = walks ? lists : nullptr;
    auto k = n.ends_with("_mma") ? mma_kernel(dev, mg, p.dtype, name, l) : program_kernel(dev, g, name, l);
    auto with = [&](const auto&... extra) {
      launch(dev, *k, gx, gy, gz, lx, ly, clc::StructArg::of(params), clc::LocalBytes{static_cast<std::size_t>(local)},
             args[bwd::q], args[bwd::k], args[bwd::v], args[bwd::out], args[bwd::dout], args[bwd::lse],
             args[bwd::bias], args[bwd::softmax_aux], args[bwd::cu_seqlens_q], args[bwd::cu_seqlens_k],
             args[bwd::q_segment_ids], args[bwd::kv_segment_ids], args[bwd::dq], args[bwd::dk], args[bwd::dv],
             args[bwd::dbias], args[bwd::dsoftmax_aux], *delta, *parts, *scratch, *dq_sum, extra...);
    };
    if (l) with(*l->kv_counts, *l->kv_indices, *l->q_counts, *l->q_indices);
    else with();
  };
  pass("fa_prep", prep_blocks, p.heads, p.batch, prep_threads, 1, prep_threads * (prep_lanes + 1) * 4);
  if (fused) {
    const std::int64_t words = p.total_q * p.heads * p.head_dim / 2, groups = std::min<std::int64_t>(ceil_div(words, 256), 8192);
    pass("fa_dq_zero_mma", groups, 1, 1, 256, 1, 16);
    pass("fa_dkdv_mma", ceil_div(p.seq_k, 16 * mg.warps), p.kv_heads, p.batch, 32 * mg.warps, 1,
         mg.dkdv_static ? 16 : mg.dkdv_local());
    pass("fa_dq_convert_mma", groups, 1, 1, 256, 1, 16);
  } else if (mma) {
    pass("fa_dkdv_mma", ceil_div(p.seq_k, 16 * mg.warps), p.kv_heads, p.batch, 32 * mg.warps, 1, mg.dkdv_local());
    pass("fa_dq_mma", ceil_div(p.seq_q, 16 * mg.warps), p.heads, p.batch, 32 * mg.warps, 1, mg.dq_local());
  } else {
    pass("fa_dkdv", ceil_div(p.seq_k, g.bk), p.kv_heads, p.batch, g.rx, g.ry, g.dkdv_bytes());
    pass("fa_dq", ceil_div(p.seq_q, g.bq), p.heads, p.batch, g.rx, g.ry, g.dq_bytes());
  }
  if (p.has_sinks) pass("fa_finish", 1, 1, 1, prep_threads, 1, prep_threads * 4);
  if (broadcast) {
    params.flags |= program_flag::finish_dbias;
    const std::int64_t n = p.bias_batch * p.bias_heads * p.seq_q * p.seq_k;
    pass("fa_finish", std::min<std::int64_t>(ceil_div(n, prep_threads), 4096), 1, 1, prep_threads, 1,
         prep_threads * 4);
  }
}

void add_opencl_params(ParamSpace& s, std::vector<Value> variants, const Problem& p, const DeviceInfo& dev,
                       bool cpu_family, const TileNames& names) {
  const bool backward = p.backward;
  // The constraints below name the scalar tile block_q and block_k; other names replace them
  // as whole words (mma_block_q stays).
  const std::regex tq("\\bblock_q\\b"), tk("\\bblock_k\\b");
  auto n = [&](const std::string& text) {
    return std::regex_replace(std::regex_replace(text, tq, names.q), tk, names.k);
  };
  const std::string ds = ds_expr, wd = wd_expr;
  const bool mma = !cpu_family && mma_offered(p, dev);
  // Callers whose kernels take no such option (block_sparse_attention) have it off.
  s.bind({{"deterministic", std::int64_t{p.deterministic}}});
  variants.push_back(std::string("scalar"));
  if (mma) variants.push_back(std::string("mma"));
  s.param("variant", variants)
      .param(names.q, {8, 16, 32, 64}, scalar_v)
      .param(names.k, {8, 16, 32, 64}, scalar_v)
      .param("threads_x", {4, 8, 16, 32}, scalar_v)
      .param("threads_y", {2, 4, 8, 16}, scalar_v)
      .constraint(n("block_q % threads_y == 0 && block_k % threads_x == 0"))
      .constraint("threads_x * threads_y <= max_workgroup_size")
      .constraint("threads_x <= max_workgroup_x && threads_y <= max_workgroup_y")
      // Blocks much longer than the sequences only compute padding.
      .constraint(n("block_q == 8 || block_q < 2 * seq_q"))
      .constraint(n("block_k == 8 || block_k < 2 * seq_k"))
      // Score tiles and output rows per work-item stay in registers.
      .constraint(n("(block_q / threads_y) * (block_k / threads_x) <= 32"))
      .constraint(n("(block_q / threads_y) * " + wd + " <= 64"));
  if (cpu_family) {
    // CPU drivers run a workgroup's work-items as a loop (vectorised along x) and keep what a
    // work-item holds across a barrier in memory, so larger groups buy no parallelism; past 128
    // work-items they only grow that memory.
    s.constraint("threads_x * threads_y >= 8 && threads_x * threads_y <= 128");
  } else {
    s.constraint("threads_x * threads_y >= 32 && threads_x * threads_y <= " + std::to_string(gpu_max_threads));
  }
  if (backward) {
    s.constraint(n("block_k % threads_y == 0"))
        .constraint(n("2 * (block_k / threads_y) * " + wd + " <= 128"))
        .constraint(n("4 * max(2 * block_k * " + ds + " + block_q * " + ds + " + 2 * block_q * (block_k + 1) + 2 * block_q, " +
                      "2 * block_q * " + ds + " + block_k * " + ds + " + block_q * (block_k + 1) + 2 * block_q) <= local_mem"));
  } else {
    s.constraint(n("4 * (block_q * " + ds + " + block_k * " + ds + " + block_q * (block_k + 1) + block_q * threads_x) <= local_mem"));
  }
  if (mma) {
    // Warps of 16-row tiles; every parameter is a build option of flash_attention_mma.cl.
    s.param("mma_warps", backward ? std::vector<Value>{2, 4, 8} : std::vector<Value>{1, 2, 4, 8}, mma_v)
        .param("mma_block_k", backward ? std::vector<Value>{32, 64} : std::vector<Value>{16, 32, 64}, mma_v)
        .constraint("32 * mma_warps <= " + std::to_string(gpu_max_threads) + " && 32 * mma_warps <= max_workgroup_size")
        .constraint("mma_block_k <= 32 || mma_block_k < 2 * seq_k");
    if (backward) {
      s.param("mma_block_q", {16, 32}, mma_v)
          .param("mma_async", {0, 1}, mma_v)
          // dq added by the dk/dv pass (atomically, in f32) instead of a pass of its own; each warp
          // adds a slice of head_dim in 16-column steps.
          .param("mma_fused", {0, 1}, mma_v)
          .constraint("mma_fused == 0 || (mma_async == 1 && head_dim % (16 * mma_warps) == 0)")
          // Its sums meet atomically, in no fixed order.
          .constraint("mma_fused == 0 || deterministic == 0")
          // Two 16-row score tiles per warp on top of k, v, dk and dv fragments exceed the registers.
          .constraint("mma_block_q == 16 || head_dim <= 64")
          .constraint("16 * mma_warps <= 32 || 16 * mma_warps < 2 * seq_k")
          .constraint("mma_async == 1 || 4 * max(2 * mma_block_k * (head_dim / 2 + 4) + head_dim * (mma_block_k / 2 + 4), "
                      "2 * mma_block_q * (head_dim / 2 + 4) + 2 * head_dim * (mma_block_q / 2 + 4) + 2 * mma_block_q) <= local_mem")
          // The fused pass alone, and it may take a fixed-size array (static_local_mem).
          .constraint("mma_async == 0 || 16 + max((1 - mma_fused) * 4 * mma_block_k * (2 * head_dim + 16), "
                      "4 * mma_block_q * (2 * head_dim + 16) + 16 * mma_block_q + "
                      "mma_fused * 16 * mma_warps * (2 * head_dim + 2 * mma_block_q + 32)) <= "
                      "(1 - mma_fused) * local_mem + mma_fused * static_local_mem");
    } else {
      s.param("mma_tiles", {1, 2}, mma_v)
          .param("mma_async", {0, 1}, mma_v)
          .param("mma_stages", {1, 2, 3}, mma_v)
          // Two tiles' q fragments, outputs and 64-key scores exceed the registers at head_dim 128.
          .constraint("mma_tiles == 1 || head_dim <= 64 || mma_block_k <= 32")
          .constraint("16 * mma_warps * mma_tiles <= 32 || 16 * mma_warps * mma_tiles < 2 * seq_q")
          // Through registers: one or two buffers. By cp.async: a ring of two or three, or one
          // stage with k and v apart (each copied under the other's arithmetic).
          .constraint("mma_async == 1 || mma_stages <= 2")
          // Another buffer pays only when there is a block to fill it with.
          .constraint("mma_stages == 1 || mma_block_k < seq_k")
          .constraint("mma_stages <= 2 || 2 * mma_block_k < seq_k")
          .constraint("mma_async == 1 || 4 * mma_stages * (mma_block_k * (head_dim / 2 + 4) + head_dim * "
                      "(mma_block_k / 2 + 4)) <= local_mem")
          .constraint("mma_async == 0 || 16 + 2 * mma_stages * mma_block_k * (2 * head_dim + 16) <= local_mem");
    }
  }
  s.bind({{"head_dim_class", head_dim_class(p.head_dim)},
          {"max_workgroup_x", std::int64_t{dev.max_workgroup_dims[0]}},
          {"max_workgroup_y", std::int64_t{dev.max_workgroup_dims[1]}}});
}

ParamSpace opencl_space(const Invocation& inv, const DeviceInfo& dev, bool backward, bool cpu_family) {
  const Vars vars = backward ? FlashAttentionBwdKernel().vars(inv) : FlashAttentionKernel().vars(inv);
  ParamSpace s;
  add_opencl_params(s, {}, Problem::of(inv), dev, cpu_family);
  s.bind(vars).bind(device_vars(dev));
  return s;
}

bool vector_red(const DeviceInfo& info) {
  const std::string& a = info.architecture;  // "sm_90" where NVIDIA's driver names it
  int cc = 0;
  return a.starts_with("sm_") && std::from_chars(a.data() + 3, a.data() + a.size(), cc).ec == std::errc{} && cc >= 90;
}

std::vector<Config> opencl_candidates(bool backward, bool cpu_family, bool vector_red, const TileNames& names) {
  auto cfg = [&](std::int64_t bq, std::int64_t bk, std::int64_t rx, std::int64_t ry) {
    return Config{{"variant", std::string("scalar")}, {names.q, bq}, {names.k, bk}, {"threads_x", rx}, {"threads_y", ry}};
  };
  auto mma = [&](std::int64_t warps, std::int64_t bk, std::int64_t x, bool async, std::int64_t stages = 1,
                 bool fused = false) {
    Config c{{"variant", std::string("mma")}, {"mma_warps", warps}, {"mma_block_k", bk}, {backward ? "mma_block_q" : "mma_tiles", x}};
    c.set("mma_async", async ? 1 : 0);
    if (!backward) c.set("mma_stages", stages);
    if (backward) c.set("mma_fused", fused ? 1 : 0);
    return c;
  };
  if (cpu_family)
    return {cfg(32, 32, 8, 4), cfg(16, 32, 8, 4), cfg(16, 16, 8, 4), cfg(8, 16, 8, 4), cfg(8, 8, 8, 4), cfg(8, 8, 4, 8)};
  // Tensor cores first where the space offers them, k and v copied by cp.async (mma_async 1): an
  // H200's best of a tune at B4 H16 S4096 f16 (bench/results/h200-2026-11-27/fa-rt2; forward,
  // head_dim 128: 4 warps of two 16-row tiles over 32-key blocks, two stages; backward: 4 warps,
  // 32-key blocks for dq, 16-row query blocks for dk/dv). Through registers after them, for
  // devices whose compiler rejects the asynchronous copies.
  // The backward's dq added by the dk/dv pass (mma_fused) leads where four floats go in one red
  // (H200: 7% faster than the two passes); with one red a float it ran 8% slower than them.
  std::vector<Config> tries;
  if (backward && vector_red) tries.push_back(mma(4, 32, 16, true, 1, true));
  if (backward)
    tries.insert(tries.end(), {mma(4, 32, 16, true), mma(2, 32, 16, true), mma(4, 32, 16, false), mma(2, 32, 16, false)});
  else
    tries = {mma(4, 32, 2, true, 2), mma(4, 32, 1, true, 1), mma(2, 32, 1, true, 2), mma(8, 64, 1, true, 1),
             mma(8, 64, 1, false), mma(4, 32, 2, false), mma(4, 32, 1, false), mma(2, 32, 1, false)};
  if (backward) {
    // With 48 KiB of local memory and head_dim 128 these are the largest that fit.
    tries.insert(tries.end(), {cfg(16, 32, 16, 8), cfg(16, 16, 16, 8), cfg(8, 16, 16, 8), cfg(8, 8, 8, 8), cfg(8, 8, 4, 8)});
  } else {
    tries.insert(tries.end(), {cfg(32, 32, 16, 8), cfg(16, 32, 16, 8), cfg(16, 16, 16, 8), cfg(8, 16, 16, 8), cfg(8, 8, 8, 8), cfg(8, 8, 4, 8)});
  }
  return tries;
}

Config opencl_heuristic(const Invocation& inv, const DeviceInfo& dev, bool backward, bool cpu_family) {
  const ParamSpace space = opencl_space(inv, dev, backward, cpu_family);
  for (const auto& c : opencl_candidates(backward, cpu_family, vector_red(dev)))
    if (space.admits(c)) return c;
  auto all = space.enumerate();
  if (all.empty()) throw SelectionError("flash_attention opencl: no config fits " + dev.id() + " for " + inv.signature());
  return all.front();
}

EJK_BUILTIN(implementations, "flash_attention/opencl") {
  clc::add<OpenCLForward>(r);
  clc::add<OpenCLBackward>(r);
}

}  // namespace ejk::kernels::flash_attention
