// native_sparse_attention and its backward on OpenCL: nsa.cl's kernels, enqueued in order.
//   nsa_pool      one work-item per (token, kv head, column): the mean of every whole block's
//                 keys and values (f32 scratch, at the block's first row);
//   nsa_fwd       one group per (token, kv head, part of the group's query heads): both
//                 branches over staged tiles of TILE keys shared by the part's heads;
//   nsa_fwd_mma   (variant mma, nsa_mma.cl) the same on tensor cores, 16 query heads a group;
//   nsa_bwd_dq    same grid: dg, the rows' deltas and dq;
//   nsa_bwd_dq_mma, nsa_bwd_dcmp_mma, nsa_bwd_dkv_mma  (the backward's variant mma,
//                 nsa_mma.cl) the same three passes on tensor cores, the forward's grid; the
//                 pooled rows and the keys in tiles of 16, the fragments' rows;
//   nsa_bwd_dcmp  one group per (token, kv head), working where the token lies in a whole block:
//                 its share of the pooled row's gradient (the queries at its offset in the block);
//   nsa_bwd_clear, nsa_bwd_mark  the selection's inverse: per (block, kv head) a bitmap of the
//                 queries that list it (SelectionBitmap in nsa.hpp);
//   nsa_bwd_dkv   one group per (token, kv head), working where the token starts a tile within
//                 its block: the gradient of the tile's keys from the queries the bitmap names,
//                 in token order, plus the pooled gradient (the block's shares summed in order).
// Every output element has one writer, summed in a fixed order: deterministic (the bitmap's
// bits are set by atomic_or, which gives the same bitmap in any order). Work-group size, tile and
// heads per group are -D options; the rest are arguments.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/clc/clc_device.hpp"
#include "common/builtin.hpp"
#include "common/dtype_code.hpp"
#include "ejk/error.hpp"
#include "native_sparse_attention/nsa.hpp"
#include "native_sparse_attention/space.hpp"

namespace ejk::kernels::native_sparse_attention {
namespace {

constexpr const char* source_key = "native_sparse_attention/nsa.cl";
constexpr const char* mma_key = "native_sparse_attention/nsa_mma.cl";
constexpr const char* seq_key = "native_sparse_attention/nsa_seq.h";
const char* const scalar_v = "variant == \"scalar\"";
const char* const mma_v = "variant == \"mma\"";

// nsa_mma.cl's local memory: each warp's tile of k and v rows (padded by 16 bytes), or the warps'
// o, max and sum as they merge, whichever is larger.
std::int64_t mma_local_bytes(const Problem& p, std::int64_t warps, std::int64_t block_n) {
  return std::max<std::int64_t>(warps * block_n * ((2 * p.dk + 16) + (2 * p.dv + 16)), warps * 16 * (p.dv + 2) * 4);
}

// The tensor-core forward takes f16 or bf16 with head dims multiples of 16 up to 128 (its q and
// o fragments stay in registers), blocks of whole 16-key tiles, and groups of at most 16 query
// heads or whole multiples of 16 (the rows of a fragment), on devices that list m16n8k16
// fragments of that type with f32 accumulation (NVIDIA from sm_80, inline PTX).
bool mma_offered(const Problem& p, const DeviceInfo& dev) {
  if (p.dtype != DType::f16 && p.dtype != DType::bf16) return false;
  if (p.dk % 16 || p.dv % 16 || p.dk > 128 || p.dv > 128 || p.block_size % 16) return false;
  if (p.group > 16 && p.group % 16) return false;
  return !clc::is_cpu(dev) && dev.offers({16, 8, 16, p.dtype, DType::f32}) &&
         mma_local_bytes(p, 2, 16) <= static_cast<std::int64_t>(dev.local_mem);
}

// nsa_mma.cl's backward passes: each warp's tile of k and v rows (dq; the key pass stages 16 rows
// of q and do, never more), or the warps' dq, dk or dv parts, and the dq pass's row terms.
std::int64_t mma_bwd_local_bytes(const Problem& p, std::int64_t warps, std::int64_t block_n) {
  return std::max<std::int64_t>(warps * block_n * ((2 * p.dk + 16) + (2 * p.dv + 16)),
                                warps * 16 * std::max(p.dk, p.dv) * 4) +
         256;
}

std::string mma_options(const Problem& p, std::int64_t nw, std::int64_t bk) {
  return " -DDK=" + std::to_string(p.dk) + " -DDV=" + std::to_string(p.dv) + " -DNW=" + std::to_string(nw) +
         " -DBK=" + std::to_string(bk) + " -DBF16=" + (p.dtype == DType::bf16 ? "1" : "0");
}

// The tensor-core knobs (build options NW and BK) of either direction; `merge` is the bytes a
// warp's part takes as the warps meet, per row of 16, `extra` the bytes of the rest.
void mma_params(ParamSpace& s, const std::string& merge, const std::string& extra) {
  s.param("mma_warps", {2, 4}, mma_v)
      .param("mma_block_n", {16, 32}, mma_v)
      .constraint("block_size % mma_block_n == 0")
      .constraint("max(mma_warps * mma_block_n * (2 * head_dim_k + 2 * head_dim_v + 32), mma_warps * 16 * " + merge +
                  ") + " + extra + " <= local_mem");
}

struct Common {
  std::int64_t threads, tile, hpg;
};

Common checked(const Problem& p, const Config& c, const char* kname) {
  Common r{c.get("threads"), c.get("block_n"), c.get("heads_per_group")};
  if (r.threads <= 0 || r.tile <= 0 || r.hpg <= 0 || p.group % r.hpg != 0)
    throw InvalidArgument(std::string(kname) + " on OpenCL: config " + c.canonical() +
                          " needs positive threads and block_n and heads_per_group dividing the group of " +
                          std::to_string(p.group));
  return r;
}

// The scalar program's geometry where only its pool, clear and mark passes run (the tensor-core
// variants'): those passes do not depend on it.
constexpr Common pool_only{128, 8, 1};

// The tensor-core variant's knobs from a config, checked: warps a group and keys a warp tile,
// `local_bytes` the local memory of the direction's build.
struct Mma {
  std::int64_t warps, block_n;
};
Mma mma_checked(const Problem& p, const Config& config, const DeviceInfo& dev,
                std::int64_t (*local_bytes)(const Problem&, std::int64_t, std::int64_t), const char* kname) {
  if (!mma_offered(p, dev))
    throw InvalidArgument(std::string(kname) + " on OpenCL: the mma variant needs f16 or bf16, head dims multiples of 16 "
                          "up to 128, block_size a multiple of 16, at most 16 query heads a kv head or a multiple of "
                          "16, and m16n8k16 fragments of the dtype (" + dev.id() + ": " + dev.name + ")");
  const Mma m{config.get("mma_warps"), config.get("mma_block_n")};
  if ((m.warps != 2 && m.warps != 4) || (m.block_n != 16 && m.block_n != 32) || p.block_size % m.block_n ||
      local_bytes(p, m.warps, m.block_n) > static_cast<std::int64_t>(dev.local_mem))
    throw InvalidArgument(std::string(kname) + " on OpenCL: config " + config.canonical() +
                          " needs mma_warps 2 or 4, mma_block_n 16 or 32 dividing block_size " +
                          std::to_string(p.block_size) + ", and " + std::to_string(local_bytes(p, m.warps, m.block_n)) +
                          " bytes of local memory (the device has " + std::to_string(dev.local_mem) + ")");
  return m;
}

std::string options_of(const Problem& p, const Common& c) {
  return " -DTHREADS=" + std::to_string(c.threads) + " -DTILE=" + std::to_string(c.tile) + " -DHPG=" +
         std::to_string(c.hpg) + " -DDK=" + std::to_string(p.dk) + " -DDV=" + std::to_string(p.dv);
}

struct Pooled {
  std::shared_ptr<Buffer> kc, vc;
};

Pooled pool(clc::Device& dev, const Problem& p, const std::string& options, std::span<const Tensor> args) {
  Pooled r{dev.allocate(static_cast<std::size_t>(std::max<std::int64_t>(1, p.tokens() * p.kv_heads * p.dk)) * 4),
           dev.allocate(static_cast<std::size_t>(std::max<std::int64_t>(1, p.tokens() * p.kv_heads * p.dv)) * 4)};
  auto k = dev.kernel(source_key, options, "nsa_pool");
  const std::size_t items = static_cast<std::size_t>(p.tokens() * p.kv_heads * (p.dk + p.dv));
  dev.launch(*k, clc::Range((items + 63) / 64 * 64), clc::Range(64), args[fwd::k], args[fwd::v],
             args[fwd::cu_seqlens], *r.kc, *r.vc, static_cast<int>(p.tokens()), static_cast<int>(p.num_seqs),
             static_cast<int>(p.kv_heads), static_cast<int>(p.block_size), dtype_code(p.dtype));
  return r;
}

class OpenCLNsa final : public clc::Implementation {
 public:
  using clc::Implementation::Implementation;
  std::string_view kernel() const override { return "native_sparse_attention"; }
  std::vector<ArgDef> args() const override { return forward_args(); }
  std::vector<std::string> sources() const override {
    return {source_key, mma_key, seq_key, clc::mma_source, clc::prelude_source};
  }
  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    ParamSpace s;
    s.param("variant", mma_offered(Problem::of(inv), dev)
                           ? std::vector<Value>{std::string("scalar"), std::string("mma")}
                           : std::vector<Value>{std::string("scalar")});
    // Tensor cores: warps a group and keys a warp tile.
    mma_params(s, "(head_dim_v + 2) * 4", "0");
    return gpu_space(NsaKernel().vars(inv), dev, false, std::move(s), scalar_v);
  }
  // Tensor cores where offered, else the scalar kernel's heuristic.
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    const ParamSpace s = space(inv, dev);
    const Config mma{{"variant", std::string("mma")}, {"mma_warps", 4}, {"mma_block_n", 16}};
    if (s.admits(mma)) return mma;
    return gpu_heuristic(s, Problem::of(inv), dev, "native_sparse_attention opencl", Config{{"variant", std::string("scalar")}});
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    auto& dev = clc::clc_device(device);
    const std::string& variant = config.text("variant");
    // The program and its geometry: work-items a group, groups a (token, kv head).
    std::shared_ptr<clc::Kernel> k;
    std::int64_t threads = 0, parts = 0;
    std::string pool_options;
    if (variant == "mma") {
      const Mma m = mma_checked(p, config, dev.info(), mma_local_bytes, "native_sparse_attention");
      if (p.tokens() == 0) return;
      k = dev.kernel(mma_key, mma_options(p, m.warps, m.block_n), "nsa_fwd_mma");
      threads = 32 * m.warps;
      parts = p.group > 16 ? p.group / 16 : 1;
      pool_options = options_of(p, pool_only);
    } else if (variant == "scalar") {
      const Common c = checked(p, config, "native_sparse_attention");
      if (p.tokens() == 0) return;
      pool_options = options_of(p, c);
      k = dev.kernel(source_key, pool_options, "nsa_fwd");
      threads = c.threads;
      parts = p.group / c.hpg;
    } else {
      throw InvalidArgument("native_sparse_attention on OpenCL: unknown variant '" + variant + "' (scalar, mma)");
    }
    const Pooled pooled = pool(dev, p, pool_options, args);
    const auto t = static_cast<std::size_t>(threads);
    dev.launch(*k, clc::Range(static_cast<std::size_t>(p.tokens()) * t, static_cast<std::size_t>(p.kv_heads * parts)),
               clc::Range(t, 1), args[fwd::q], args[fwd::k], args[fwd::v], args[fwd::g_cmp], args[fwd::g_slc],
               args[fwd::block_indices], args[fwd::block_counts], args[fwd::cu_seqlens], *pooled.kc, *pooled.vc,
               args[fwd::o], args[fwd::o_cmp], args[fwd::o_slc], args[fwd::lse], static_cast<int>(p.num_seqs),
               static_cast<int>(p.kv_heads), static_cast<int>(p.group), static_cast<int>(p.selected),
               static_cast<int>(p.block_size), static_cast<float>(p.scale), dtype_code(p.dtype));
  }
};

class OpenCLNsaBwd final : public clc::Implementation {
 public:
  using clc::Implementation::Implementation;
  std::string_view kernel() const override { return "native_sparse_attention_bwd"; }
  std::vector<ArgDef> args() const override { return backward_args(); }
  std::vector<std::string> sources() const override {
    return {source_key, mma_key, seq_key, clc::mma_source, clc::prelude_source};
  }
  // variant mma runs dq, the pooled rows' and the keys' passes on tensor cores (its own knobs; the
  // pool, clear and mark passes have one geometry), variant scalar every pass on nsa.cl's.
  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    ParamSpace s;
    s.param("variant", mma_offered(Problem::of(inv), dev)
                           ? std::vector<Value>{std::string("scalar"), std::string("mma")}
                           : std::vector<Value>{std::string("scalar")});
    mma_params(s, "max(head_dim_k, head_dim_v) * 4", "256");  // + the rows' lse and delta
    return gpu_space(NsaBwdKernel().vars(inv), dev, true, std::move(s), scalar_v);
  }
  // Tensor cores where offered, else the scalar kernels' heuristic.
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    const ParamSpace s = space(inv, dev);
    const Config mma{{"variant", std::string("mma")}, {"mma_warps", 4}, {"mma_block_n", 16}};
    if (s.admits(mma)) return mma;
    return gpu_heuristic(s, Problem::of(inv), dev, "native_sparse_attention_bwd opencl", Config{{"variant", std::string("scalar")}});
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    auto& dev = clc::clc_device(device);
    // Configs stored before the backward had variants are scalar ones.
    const std::string variant = config.has("variant") ? config.text("variant") : "scalar";
    std::string mma_build;  // the mma variant's build options
    Common c = pool_only;
    std::size_t group_threads = 0, dq_parts = 0;  // work-items a group of the three passes; groups a (token, kv head) of dq
    if (variant == "mma") {
      const Mma m = mma_checked(p, config, dev.info(), mma_bwd_local_bytes, "native_sparse_attention_bwd");
      mma_build = mma_options(p, m.warps, m.block_n);
      group_threads = static_cast<std::size_t>(32 * m.warps);
      dq_parts = static_cast<std::size_t>(p.group > 16 ? p.group / 16 : 1);
    } else if (variant == "scalar") {
      c = checked(p, config, "native_sparse_attention_bwd");
      group_threads = static_cast<std::size_t>(c.threads);
      dq_parts = static_cast<std::size_t>(p.group / c.hpg);
    } else {
      throw InvalidArgument("native_sparse_attention_bwd on OpenCL: unknown variant '" + variant + "' (scalar, mma)");
    }
    if (p.tokens() == 0) return;
    const std::string options = options_of(p, c);
    const Pooled pooled = pool(dev, p, options, args);
    const std::int64_t N = p.tokens(), H = p.kv_heads;
    auto delta = dev.allocate(static_cast<std::size_t>(N * p.heads * 2) * 4);
    auto dkc = dev.allocate(static_cast<std::size_t>(N * H * p.dk) * 4);
    auto dvc = dev.allocate(static_cast<std::size_t>(N * H * p.dv) * 4);
    const int nseq = static_cast<int>(p.num_seqs), iH = static_cast<int>(H), G = static_cast<int>(p.group);
    const int S = static_cast<int>(p.selected), BS = static_cast<int>(p.block_size), dt = dtype_code(p.dtype);
    const float scale = static_cast<float>(p.scale);
    // A pass's kernel: nsa_mma.cl's `<name>_mma` for the mma variant, nsa.cl's otherwise.
    const auto pass = [&](const std::string& name) {
      return mma_build.empty() ? dev.kernel(source_key, options, name) : dev.kernel(mma_key, mma_build, name + "_mma");
    };
    auto dq = pass("nsa_bwd_dq");
    dev.launch(*dq, clc::Range(static_cast<std::size_t>(N) * group_threads, static_cast<std::size_t>(H) * dq_parts),
               clc::Range(group_threads, 1), args[bwd::q], args[bwd::k], args[bwd::v], args[bwd::g_cmp], args[bwd::g_slc],
               args[bwd::block_indices], args[bwd::block_counts], args[bwd::cu_seqlens], *pooled.kc, *pooled.vc,
               args[bwd::o_cmp], args[bwd::o_slc], args[bwd::lse], args[bwd::dout], args[bwd::dq], args[bwd::dg_cmp],
               args[bwd::dg_slc], *delta, nseq, iH, G, S, BS, scale, dt);
    auto dcmp = pass("nsa_bwd_dcmp");
    dev.launch(*dcmp, clc::Range(static_cast<std::size_t>(N) * group_threads, static_cast<std::size_t>(H)),
               clc::Range(group_threads, 1), args[bwd::q], args[bwd::g_cmp], args[bwd::cu_seqlens], *pooled.kc,
               *pooled.vc, args[bwd::lse], args[bwd::dout], *delta, *dkc, *dvc, nseq, iH, G, BS, scale, dt);
    const SelectionBitmap sel = selection_bitmap(p);
    auto bitmap = dev.scratch(static_cast<std::size_t>(sel.words) * 4);
    auto clear = dev.kernel(source_key, options, "nsa_bwd_clear");
    const std::size_t clear_items = static_cast<std::size_t>(std::min<std::int64_t>((sel.words + 255) / 256, 65536)) * 256;
    dev.launch(*clear, clc::Range(clear_items), clc::Range(256), *bitmap, static_cast<std::int64_t>(sel.words));
    auto mark = dev.kernel(source_key, options, "nsa_bwd_mark");
    dev.launch(*mark, clc::Range(static_cast<std::size_t>((N * H + 63) / 64 * 64)), clc::Range(64),
               args[bwd::block_indices], args[bwd::block_counts], args[bwd::cu_seqlens], *bitmap, static_cast<int>(N),
               nseq, iH, S, BS, static_cast<int>(sel.per_block));
    auto dkv = pass("nsa_bwd_dkv");
    dev.launch(*dkv, clc::Range(static_cast<std::size_t>(N) * group_threads, static_cast<std::size_t>(H)),
               clc::Range(group_threads, 1), args[bwd::q], args[bwd::k], args[bwd::v], args[bwd::g_slc],
               args[bwd::block_indices], args[bwd::block_counts], args[bwd::cu_seqlens], args[bwd::lse], args[bwd::dout],
               *delta, *dkc, *dvc, *bitmap, args[bwd::dk], args[bwd::dv], nseq, iH, G, S, BS,
               static_cast<int>(sel.per_block), scale, dt);
  }
};

}  // namespace

EJK_BUILTIN(implementations, "native_sparse_attention/opencl") {
  clc::add<OpenCLNsa>(r);
  clc::add<OpenCLNsaBwd>(r);
}

}  // namespace ejk::kernels::native_sparse_attention
