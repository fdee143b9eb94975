// mla_decode on OpenCL: mla_decode.cl's three kernels, enqueued in order on the device's queue.
//   mla_absorb   one group per (AC latent columns, head, ROWS sequences): q_lat = q_nope . w_kc,
//                scaled into the log2 domain, q_pe appended (f32 scratch);
//   mla_attend   one group per (part of the context, group of heads, sequence): split-K over the
//                context, each staged tile of cache rows shared by the group's heads;
//   mla_combine  one group per (head, ROWS sequences, VC columns of out): parts merged by
//                log-sum-exp, then o_lat . w_vc.
// The absorb and combine groups take ROWS sequences each so that w_kc and w_vc are read once for
// ROWS sequences, not once for each (at DeepSeek-V3 widths 128 KiB a head).
// Tile geometry, the latent widths and whether the storage is 16-bit are -D options (they size
// local memory and registers); the dtype, head counts, the table geometry and the number of
// parts are kernel arguments, so one program serves f16 and bf16 and every batch (PoCL takes
// seconds to build each program). 16-bit tiles are staged as stored: twice the rows or heads
// fit in local memory (DeepSeek-V3 widths: 16 heads x 8 rows in 48 KiB).
// On devices with tensor-core fragments (NVIDIA from sm_80) the `mma` variant runs the attend
// pass of mla_decode_mma.cl instead (f16/bf16 on mma.sync through inline PTX, 16 heads a group):
// the f32 dot products of mla_attend bind it to the CUDA cores at these widths (about 31 FLOP a
// byte of cache). Around it, where the widths allow, the absorb and a merge-and-project pass of
// mla_decode_mma_proj.cl, small GEMMs over the batch on the same tensor cores.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/clc/clc_device.hpp"
#include "common/builtin.hpp"
#include "common/ceil_div.hpp"
#include "common/dtype_code.hpp"
#include "ejk/error.hpp"
#include "mla_attention/device_space.hpp"
#include "mla_attention/mla_attention.hpp"

namespace ejk::kernels::mla_attention {
namespace {

constexpr const char* source_key = "mla_attention/mla_decode.cl";
constexpr const char* mma_key = "mla_attention/mla_decode_mma.cl";
constexpr const char* proj_key = "mla_attention/mla_decode_mma_proj.cl";

const char* const scalar_v = "variant == \"scalar\"";
const char* const mma_v = "variant == \"mma\"";

// The tensor-core attend pass takes f16 or bf16 with the latent rank a multiple of 64 and the
// row a multiple of 16 (whole k16 steps), on devices that list m16n8k16 fragments of that type
// with f32 accumulation (NVIDIA from sm_80, inline PTX).
bool mma_offered(const Problem& p, const DeviceInfo& dev) {
  if ((p.dtype != DType::f16 && p.dtype != DType::bf16) || p.rank % 64 != 0 || p.width() % 16 != 0) return false;
  return !clc::is_cpu(dev) && dev.offers({16, 8, 16, p.dtype, DType::f32});
}

// A config's variant; configs from before variants existed are scalar.
std::string variant_of(const Config& c) {
  const std::string v = c.has("variant") ? c.text("variant") : "scalar";
  if (v != "scalar" && v != "mma") throw InvalidArgument("mla_decode opencl: unknown variant '" + v + "' (scalar, mma)");
  return v;
}


// mla_decode_mma.cl's local memory in bytes with `buffers` tiles of mma_block_n rows (the
// space's expression over its variables, and the same count for run()'s check).
std::string mma_local_text(const std::string& buffers) {
  return "4 * (" + buffers + " * mma_block_n * ((kv_lora_rank + rope_dim) / 2 + 4) + 64 * (mma_block_n + 8)"
         " + 16 * (mma_block_n / 2 + 4) + 16)";
}
std::int64_t mma_local_bytes(std::int64_t buffers, std::int64_t bn, std::int64_t width) {
  return 4 * (buffers * bn * (width / 2 + 4) + 64 * (bn + 8) + 16 * (bn / 2 + 4) + 16);
}

// The tensor-core projections around the mma attend pass (mla_decode_mma_proj.cl), where the
// widths and local memory allow; otherwise mla_decode.cl's passes run around it. The merge takes
// kMergeRows sequences a group (each thread's loads of every part in flight) and w_vc in stages
// of `kc` rows, as many stages as fit up to all of w_vc[h] (one round trip: at DeepSeek-V3 widths
// 136 KiB, where NVIDIA's fixed-size arrays may take 227 KiB), at least two.
constexpr std::int64_t kMergeRows = 4;
struct MmaProjections {
  bool absorb = false;
  std::int64_t kc = 0;      // rows of w_vc a stage of the merge; 0: mla_decode.cl's combine
  std::int64_t stages = 0;  // stages of the merge's ring
};
MmaProjections mma_projections(const Problem& p, std::int64_t splits, std::int64_t local_mem) {
  MmaProjections m;
  m.absorb = p.nope_dim % 16 == 0 && (32 * (p.nope_dim + 8) + p.nope_dim * 72) * 2 <= local_mem;
  if (p.v_dim % 16 != 0 || splits > 32) return m;
  const std::int64_t fixed = 8 * (p.rank + 8) * 2 + kMergeRows * 32 * 4;
  for (std::int64_t kc : {64, 32}) {
    const std::int64_t stage = kc * (p.v_dim + 8) * 2;
    if (p.rank % kc == 0 && fixed + 2 * stage <= local_mem) {
      m.kc = kc;
      m.stages = std::clamp<std::int64_t>((local_mem - fixed) / stage, 2, std::max<std::int64_t>(2, p.rank / kc));
      break;
    }
  }
  return m;
}

class OpenCLMlaDecode final : public clc::Implementation {
 public:
  using clc::Implementation::Implementation;
  std::string_view kernel() const override { return "mla_decode"; }
  std::vector<ArgDef> args() const override { return decode_args(); }
  std::vector<std::string> sources() const override {
    return {source_key, mma_key, proj_key, clc::mma_source, clc::prelude_source};
  }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    const bool mma = mma_offered(Problem::of(inv), dev);
    ParamSpace s;
    s.param("variant", mma ? std::vector<Value>{std::string("scalar"), std::string("mma")}
                           : std::vector<Value>{std::string("scalar")});
    // The group's queries, scores and reduction space in f32, and a tile as stored (rows padded
    // by one 32-bit word).
    s = device_space(inv, dev,
                     "(heads_per_group * (kv_lora_rank + rope_dim) + heads_per_group * block_n + threads"
                     " + 3 * heads_per_group) * 4 + block_n * (kv_lora_rank + rope_dim + 4 / dtype_size) * dtype_size"
                     " <= local_mem",
                     std::move(s), scalar_v);
    if (mma) {
      // mla_decode_mma.cl's NW, BN, ASYNC and STAGES. Its local memory: the tile buffers (rows
      // padded by 16 bytes; one for the register-staged path, a ring of mma_stages for cp.async),
      // the four k-groups' partial scores, P and the rescale factors.
      s.param("mma_warps", {4, 8}, mma_v)
          .param("mma_block_n", {16, 32, 64}, mma_v)
          .param("mma_async", {0, 1}, mma_v)
          .param("mma_stages", {2, 3}, "variant == \"mma\" && mma_async == 1")
          .constraint("block_size % mma_block_n == 0")
          .constraint("mma_block_n >= 4 * mma_warps")
          .constraint("kv_lora_rank % (16 * mma_warps) == 0")
          .constraint("32 * mma_warps <= max_workgroup_size")
          .constraint("mma_async == 1 || " + mma_local_text("1") + " <= static_local_mem")
          .constraint(mma_local_text("mma_stages") + " <= static_local_mem")
          .constraint("splits == 1 || splits * mma_block_n <= max_context");
    }
    return s;
  }

  // Tensor cores first where the space offers them: 16 heads a group of 4 warps over 32-row
  // tiles (the CUDA kernel's geometry), parts until there is a group for every two compute units
  // (two such groups' registers fill one of NVIDIA's multiprocessors). Otherwise: GPUs, the most
  // heads per staged tile that local memory and registers allow (the cache is read once per
  // group), 256 work-items where the latent is wide; CPU drivers, 64 work-items, a few heads per
  // group, parts for every core.
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    const Problem p = Problem::of(inv);
    const ParamSpace s = space(inv, dev);
    const bool cpu = clc::is_cpu(dev);
    const std::int64_t cus = std::max<std::int64_t>(1, dev.compute_units);
    // Tensor-core geometries: warps, tile rows, and the cp.async ring's stages or 0 for the
    // register-staged path, largest tiles first: where fixed-size local arrays may pass 48 KiB
    // (NVIDIA: 227 KiB from sm_90), an exhaustive tune of the 78 mma configs on an H200 at B32
    // H16 ctx 4096 (DeepSeek-V3 widths) put two stages of 64 rows first, 32 rows 7% slower and
    // 16 rows 9% (bench/results/h200-2026-11-27e/mla); within 48 KiB, two stages of 16 rows were
    // the best of 24 (bench/results/h200-2026-11-27/mla-async). Then the most parts that keep
    // every group in one wave, with as many groups a compute unit as its local memory fits (at
    // most two: their registers fill one of NVIDIA's multiprocessors).
    struct MmaTry {
      std::int64_t warps, bn, stages;
    };
    const std::vector<MmaTry> mma_tries{{4, 64, 2}, {4, 32, 2}, {4, 16, 2}, {8, 32, 2}, {8, 64, 2},
                                        {4, 32, 0}, {8, 32, 0}, {4, 16, 0}, {4, 64, 0}, {8, 64, 0}};
    const std::int64_t groups = p.batch * ceil_div(p.heads, 16);  // a part's
    for (const MmaTry& m : mma_tries) {
      const std::int64_t local = mma_local_bytes(std::max<std::int64_t>(1, m.stages), m.bn, p.width());
      const std::int64_t resident = std::clamp<std::int64_t>(static_cast<std::int64_t>(dev.static_local()) / local, 1, 2);
      Config c{{"variant", std::string("mma")}, {"mma_warps", m.warps}, {"mma_block_n", m.bn},
               {"mma_async", std::int64_t{m.stages > 0}},
               {"splits", one_wave_splits(p, groups, std::max<std::int64_t>(256, m.bn), resident * cus)}};
      if (m.stages > 0) c.set("mma_stages", m.stages);
      if (s.admits(c)) return c;
    }
    struct Try {
      std::int64_t threads, hg, bn;
    };
    std::vector<Try> tries;
    if (cpu) tries = {{64, 4, 16}, {64, 2, 16}, {64, 4, 8}, {64, 2, 8}, {64, 1, 8}, {64, 1, 4}};
    else
      tries = {{256, 16, 8}, {256, 8, 16}, {256, 8, 8}, {128, 8, 8}, {128, 4, 16}, {128, 4, 8},
               {64, 4, 16},  {64, 2, 16},  {64, 2, 8},  {64, 1, 8},  {64, 1, 4}};
    for (const auto& t : tries) {
      if (p.heads % t.hg) continue;
      Config c{{"variant", std::string("scalar")}, {"threads", t.threads}, {"heads_per_group", t.hg}, {"block_n", t.bn},
               {"splits", pick_splits(p, p.batch * (p.heads / t.hg), t.bn, cus)}};
      if (s.admits(c)) return c;
    }
    auto all = s.enumerate();
    if (all.empty()) throw SelectionError("mla_decode opencl: no config fits " + dev.id() + " for " + inv.signature());
    return all.front();
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    auto& dev = clc::clc_device(device);
    const bool mma = variant_of(config) == "mma";
    const std::int64_t splits = config.get("splits");
    auto pow2 = [](std::int64_t v) { return v > 0 && (v & (v - 1)) == 0; };
    // The mma variant's absorb and combine passes come from a small scalar geometry's program.
    const std::int64_t threads = mma ? 256 : config.get("threads"), hg = mma ? 1 : config.get("heads_per_group");
    const std::int64_t bn = mma ? 4 : config.get("block_n");
    if (!pow2(threads) || !pow2(hg) || !pow2(bn) || splits <= 0 || splits > threads || p.heads % hg || p.block_size % bn)
      throw InvalidArgument("mla_decode on OpenCL: config " + config.canonical() +
                            " needs powers of two for threads, heads_per_group (dividing heads " + std::to_string(p.heads) +
                            ") and block_n (dividing block_size " + std::to_string(p.block_size) +
                            "), and splits from 1 to threads (the combine pass's " + std::to_string(threads) + ")");
    std::int64_t warps = 0, mma_bn = 0, async = 0, stages = 1;
    if (mma) {
      warps = config.get("mma_warps");
      mma_bn = config.get("mma_block_n");
      // Configs from before the cp.async path stage through registers.
      async = config.has("mma_async") ? config.get("mma_async") : 0;
      if (async == 1) stages = config.get("mma_stages");
      if (!mma_offered(p, dev.info()))
        throw InvalidArgument("mla_decode opencl: config " + config.canonical() +
                              " needs f16 or bf16 with kv_lora_rank a multiple of 64 and kv_lora_rank + rope_dim of 16 "
                              "on a device with 16x8x16 " + std::string(to_string(p.dtype)) +
                              " tensor-core fragments (" + dev.info().id() + ": " + dev.info().name + ")");
      const std::int64_t local = mma_local_bytes(stages, mma_bn, p.width());
      if ((warps != 4 && warps != 8) || (mma_bn != 16 && mma_bn != 32 && mma_bn != 64) || mma_bn < 4 * warps ||
          p.block_size % mma_bn || p.rank % (16 * warps) || (async != 0 && async != 1) || stages < 1 ||
          (async == 1 && stages < 2) || local > static_cast<std::int64_t>(dev.info().static_local()))
        throw InvalidArgument("mla_decode opencl: config " + config.canonical() +
                              " needs mma_warps 4 or 8, mma_block_n 16, 32 or 64 (at least 4 mma_warps, dividing "
                              "block_size " + std::to_string(p.block_size) + "), kv_lora_rank a multiple of 16 mma_warps,"
                              " mma_async 0 or 1 (with mma_stages of at least 2) and " + std::to_string(local) +
                              " bytes of local memory (the device has " + std::to_string(dev.info().static_local()) +
                              " for fixed-size arrays)");
    }
    if (p.batch == 0) return;

    std::string options;
    auto def = [&](const char* name, std::int64_t v) { options += " -D" + std::string(name) + "=" + std::to_string(v); };
    def("THREADS", threads);
    def("HG", hg);
    def("BLOCK_N", bn);
    def("RANK", p.rank);
    def("ROPE", p.rope_dim);
    def("STAGE16", p.dtype != DType::f32);
    // The most sequences (up to 4) whose merged o_lat and partial sums fit the combine's local memory.
    std::int64_t rows = 4;
    while (rows > 1 && rows * (p.rank + threads) * 4 > static_cast<std::int64_t>(dev.info().local_mem)) rows /= 2;
    def("ROWS", rows);
    // Latent columns of an absorb group and columns of out of a combine group (a warp's width).
    constexpr std::int64_t absorb_cols = 32, combine_cols = 32;
    def("AC", absorb_cols);
    def("VC", combine_cols);
    const MmaProjections proj =
        mma ? mma_projections(p, splits, static_cast<std::int64_t>(dev.info().static_local())) : MmaProjections{};
    const std::string widths = " -DRANK=" + std::to_string(p.rank) + " -DROPE=" + std::to_string(p.rope_dim) +
                               " -DBF16=" + (p.dtype == DType::bf16 ? "1" : "0");
    auto absorb = proj.absorb ? dev.kernel(proj_key, "-DNOPE=" + std::to_string(p.nope_dim) + widths, "mla_absorb_mma")
                              : dev.kernel(source_key, options, "mla_absorb");
    auto combine = proj.kc ? dev.kernel(proj_key,
                                        "-DVDIM=" + std::to_string(p.v_dim) + " -DMR=" + std::to_string(kMergeRows) +
                                            " -DKC=" + std::to_string(proj.kc) + " -DSTG=" + std::to_string(proj.stages) + widths,
                                        "mla_merge_project_mma")
                           : dev.kernel(source_key, options, "mla_combine");
    std::shared_ptr<clc::Kernel> attend;
    if (mma)
      attend = dev.kernel(mma_key,
                          "-DNW=" + std::to_string(warps) + " -DBN=" + std::to_string(mma_bn) + widths +
                              " -DASYNC=" + std::to_string(async) +
                              (async ? " -DSTAGES=" + std::to_string(stages) : std::string()),
                          "mla_attend_mma");
    else
      attend = dev.kernel(source_key, options, "mla_attend");

    const std::int64_t bh = p.batch * p.heads;
    auto qs = dev.scratch(static_cast<std::size_t>(bh * p.width()) * 4);
    auto part_o = dev.scratch(static_cast<std::size_t>(bh * splits * p.rank) * 4);
    auto part_ml = dev.scratch(static_cast<std::size_t>(bh * splits * 2) * 4);
    const int dtype = dtype_code(p.dtype);
    const auto t = static_cast<std::size_t>(threads);
    const auto row_groups = static_cast<std::size_t>(ceil_div(p.batch, rows));
    if (proj.absorb)
      dev.launch(*absorb,
                 clc::Range(static_cast<std::size_t>(p.rank / 64 + ceil_div(p.rope_dim, 64)) * 128,
                            static_cast<std::size_t>(p.heads), static_cast<std::size_t>(ceil_div(p.batch, 32))),
                 clc::Range(128, 1, 1), args[arg::q_nope], args[arg::q_pe], args[arg::w_kc], *qs,
                 static_cast<int>(p.batch), static_cast<int>(p.heads), static_cast<float>(p.scale));
    else
      dev.launch(*absorb,
                 clc::Range(static_cast<std::size_t>(ceil_div(p.rank, absorb_cols)) * t,
                            static_cast<std::size_t>(p.heads), row_groups),
                 clc::Range(t, 1, 1), args[arg::q_nope], args[arg::q_pe], args[arg::w_kc], *qs,
                 static_cast<int>(p.batch), static_cast<int>(p.heads), static_cast<int>(p.nope_dim),
                 static_cast<float>(p.scale), dtype);
    if (mma) {
      const auto nt = static_cast<std::size_t>(32 * warps);
      dev.launch(*attend,
                 clc::Range(static_cast<std::size_t>(splits) * nt, static_cast<std::size_t>(ceil_div(p.heads, 16)),
                            static_cast<std::size_t>(p.batch)),
                 clc::Range(nt, 1, 1), *qs, args[arg::kv_cache], args[arg::block_tables], args[arg::context_lens],
                 *part_o, *part_ml, static_cast<int>(p.heads), static_cast<int>(p.block_size),
                 static_cast<int>(p.max_blocks), static_cast<int>(splits));
    } else {
      dev.launch(*attend,
                 clc::Range(static_cast<std::size_t>(splits) * t, static_cast<std::size_t>(p.heads / hg),
                            static_cast<std::size_t>(p.batch)),
                 clc::Range(t, 1, 1), *qs, args[arg::kv_cache], args[arg::block_tables], args[arg::context_lens],
                 *part_o, *part_ml, static_cast<int>(p.heads), static_cast<int>(p.block_size),
                 static_cast<int>(p.max_blocks), static_cast<int>(splits), dtype);
    }
    if (proj.kc) {
      dev.launch(*combine,
                 clc::Range(static_cast<std::size_t>(p.heads) * 256,
                            static_cast<std::size_t>(ceil_div(p.batch, kMergeRows)), 1),
                 clc::Range(256, 1, 1), *part_o, *part_ml, args[arg::w_vc], args[arg::out], static_cast<int>(p.batch),
                 static_cast<int>(p.heads), static_cast<int>(splits));
    } else {
      dev.launch(*combine,
                 clc::Range(static_cast<std::size_t>(p.heads) * t, row_groups,
                            static_cast<std::size_t>(ceil_div(p.v_dim, combine_cols))),
                 clc::Range(t, 1, 1), *part_o, *part_ml, args[arg::w_vc], args[arg::out], static_cast<int>(p.batch),
                 static_cast<int>(p.heads), static_cast<int>(splits), static_cast<int>(p.v_dim), dtype);
    }
  }
};

}  // namespace

EJK_BUILTIN(implementations, "mla_attention/opencl") { clc::add<OpenCLMlaDecode>(r); }

}  // namespace ejk::kernels::mla_attention
