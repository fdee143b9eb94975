// mla_decode on Vulkan: the passes of mla_decode.glsl, dispatched in order (the device puts a
// barrier between dispatches):
//   absorb   one group per (32 latent columns, head, ROWS sequences): q_lat = q_nope . w_kc,
//            scaled into the log2 domain, q_pe appended (f32 scratch);
//   attend   one group per (part of the context, group of heads, sequence): split-K over the
//            context, each staged tile of cache rows shared by the group's heads;
//   combine  one group per (head, ROWS sequences, 32 columns of out): parts merged by
//            log-sum-exp, then o_lat . w_vc.
// With the cooperative-matrix attend pass, where the widths allow, the absorb and a
// merge-and-project pass on cooperative matrices too (per head small GEMMs over the batch).
// The absorb and combine groups take ROWS sequences each so that w_kc and w_vc are read once for
// ROWS sequences, not once for each (at DeepSeek-V3 widths 128 KiB a head), as on OpenCL.
// "16" modules read and write f16/bf16 through 16-bit storage; the others only f32, so devices
// without 16-bit storage still run f32; 16-bit tiles are staged in shared memory as stored, two
// elements a word (DeepSeek-V3 widths: 16 heads x 8 rows in 48 KiB). Tile geometry, the latent
// widths and the staging are specialization constants; everything else is a push constant, so
// a few pipelines serve every batch.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/vulkan/vulkan_device.hpp"
#include "common/builtin.hpp"
#include "common/vulkan_coopmat.hpp"
#include "common/dtype_code.hpp"
#include "ejk/error.hpp"
#include "mla_attention/device_space.hpp"
#include "mla_attention/mla_attention.hpp"

namespace ejk::kernels::mla_attention {
namespace {

// Mirrors the shader's push-constant block.
struct Push {
  std::uint32_t heads, nope_dim, block_size, max_blocks;
  std::uint32_t splits, v_dim, dtype;
  float scale;
  std::uint32_t batch;
};

std::uint32_t u32(std::int64_t v) { return static_cast<std::uint32_t>(v); }

// The cooperative-matrix attend pass (mla_decode_attend_coopmat.comp): f16 caches, 16 heads a
// group, tiles of 16 rows within a page, a row of whole 16-column steps, full subgroups of 32,
// and 16x16x16 f16 x f16 -> f32 fragments.
bool coopmat_offered(const Problem& p, const DeviceInfo& dev) {
  return p.dtype == DType::f16 && p.heads % 16 == 0 && p.rank % 64 == 0 && p.width() % 16 == 0 && p.block_size % 16 == 0 &&
         f16_fragments(dev, {32});
}

// Its shared memory: a tile and P as f16 (rows padded by 8 halves; q is staged in the tile's
// room), the subgroups' scores and the row partials as f32.
std::int64_t coopmat_shared(std::int64_t width, std::int64_t subgroups) {
  return (16 * (width + 8) + 16 * 24) * 2 + (subgroups * 256 + 128) * 4;
}

// The cooperative-matrix absorb and merge-and-project passes around that attend pass
// (mla_decode_absorb_coopmat.comp, mla_decode_merge_coopmat.comp), where the widths and shared
// memory allow; otherwise the scalar absorb and combine run around it. Their shared memory: the
// absorb's 32 rows of q_nope and 64 columns of w_kc as f16 with its products in f32; the merge's
// 16 rows of o and a chunk of `kc` rows of w_vc as f16 with the parts' weights and the products
// in f32.
std::int64_t absorb_coopmat_shared(const Problem& p) { return (32 * (p.nope_dim + 8) + p.nope_dim * 72) * 2 + 32 * 64 * 4; }
std::int64_t merge_coopmat_shared(const Problem& p, std::int64_t kc) {
  return (16 * (p.rank + 8) + kc * (p.v_dim + 8)) * 2 + (16 * 32 + 16 * p.v_dim) * 4;
}
bool absorb_coopmat(const Problem& p, std::int64_t local_mem) {
  return p.nope_dim % 16 == 0 && absorb_coopmat_shared(p) <= local_mem;
}
// Rows of w_vc a chunk of the merge, the largest that fit; 0 where the scalar combine runs.
std::int64_t merge_coopmat_chunk(const Problem& p, std::int64_t splits, std::int64_t local_mem) {
  if (p.v_dim % 16 != 0 || splits > 32) return 0;
  for (std::int64_t kc : {64, 32, 16})
    if (p.rank % kc == 0 && merge_coopmat_shared(p, kc) <= local_mem) return kc;
  return 0;
}

// Sequences a merge group takes: 16 where that gives every compute unit a group, else fewer (8,
// then 4). A group streams its parts' o_lat and all of w_vc[h]; on an H200 at B32 H16 the pass
// took 15 us with 16 (32 groups), 12.2 with 8, 11.2 with 4 (128 groups), and 16.8 and 28.4 with
// 2 and 1, whose groups each read all of w_vc[h] for fewer rows.
std::int64_t merge_rows(const Problem& p, std::int64_t compute_units) {
  for (std::int64_t rows : {16, 8})
    if (p.heads * ((p.batch + rows - 1) / rows) >= compute_units) return rows;
  return 4;
}

const char* const scalar_v = "variant == \"scalar\"";

// 16-bit storage with an even row width is staged as stored, two elements a word.
bool stage16(const Problem& p) { return p.dtype != DType::f32 && p.width() % 2 == 0; }
// Shared-memory bytes of one staged row, padding included.
std::int64_t staged_row_bytes(const Problem& p) { return stage16(p) ? (p.width() / 2 + 1) * 4 : (p.width() + 1) * 4; }

class VulkanMlaDecode final : public Implementation {
 public:
  std::string_view kernel() const override { return "mla_decode"; }
  Backend backend() const override { return Backend::vulkan; }
  std::vector<ArgDef> args() const override { return decode_args(); }
  std::vector<std::string> sources() const override {
    std::vector<std::string> s{"mla_attention/mla_decode_absorb.spv",  "mla_attention/mla_decode_absorb16.spv",
                               "mla_attention/mla_decode_attend.spv",  "mla_attention/mla_decode_attend16.spv",
                               "mla_attention/mla_decode_combine.spv", "mla_attention/mla_decode_combine16.spv"};
#ifdef EJK_HAVE_COOPMAT
    s.push_back("mla_attention/mla_decode_attend_coopmat.spv");
    s.push_back("mla_attention/mla_decode_absorb_coopmat.spv");
    s.push_back("mla_attention/mla_decode_merge_coopmat.spv");
#endif
    return s;
  }

  // 16-bit dtypes need 16-bit storage buffers.
  bool supports(const Invocation& inv, const DeviceInfo& dev) const override {
    if (inv.args.empty() || inv.args[0].dtype == DType::f32) return true;
    return vulkan::physical_device(dev.index).storage16;
  }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    const Problem p = Problem::of(inv);
    const bool coop = coopmat_offered(p, dev);
    ParamSpace s;
    s.param("variant", coop ? std::vector<Value>{std::string("scalar"), std::string("coopmat")}
                            : std::vector<Value>{std::string("scalar")});
    // The group's queries, scores and reduction space in f32, and a tile (16-bit storage as
    // stored where rows have an even width, else f32; rows padded by one word).
    s = device_space(inv, dev,
                     "(heads_per_group * (kv_lora_rank + rope_dim) + heads_per_group * block_n + threads"
                     " + 3 * heads_per_group + 1) * 4 + block_n * staged_row_bytes <= local_mem",
                     std::move(s), scalar_v);
    s.bind({{"staged_row_bytes", staged_row_bytes(p)}});
    if (coop) {
      // Subgroups of 32 splitting the latent columns (16 each at least); 16-row tiles.
      s.param("coop_subgroups", {4, 8}, "variant == \"coopmat\"")
          .constraint("kv_lora_rank % (16 * coop_subgroups) == 0")
          .constraint("32 * coop_subgroups <= max_workgroup_size")
          .constraint("(16 * (kv_lora_rank + rope_dim + 8) + 16 * 24) * 2 + (coop_subgroups * 256 + 128) * 4 <= local_mem")
          .constraint("splits == 1 || splits * 16 <= max_context");
    }
    return s;
  }

  // Discrete GPUs: the most heads per staged tile that shared memory and registers allow (the
  // cache is read once per group), 256 invocations where the latent is wide. Others (lavapipe,
  // integrated): smaller groups, parts for every core.
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    const Problem p = Problem::of(inv);
    const ParamSpace s = space(inv, dev);
    const std::int64_t cus = std::max<std::int64_t>(1, dev.compute_units);
    if (coopmat_offered(p, dev)) {
      // Tensor cores where offered, with parts until there are two groups for every compute
      // unit (24 KiB of shared memory each at DeepSeek-V3 widths) and no more: on an H200 at B32
      // H16 ctx 4096 8 parts (256 groups) ran 98 us, 4 116 and 16 117, the parts' o_lat and
      // their merge growing with them.
      const std::int64_t splits = one_wave_splits(p, p.batch * (p.heads / 16), 16, 2 * cus);
      for (std::int64_t nsg : {4, 8}) {
        Config c{{"variant", std::string("coopmat")}, {"coop_subgroups", nsg}, {"splits", splits}};
        if (s.admits(c)) return c;
      }
    }
    struct Try {
      std::int64_t threads, hg, bn;
    };
    std::vector<Try> tries;
    if (dev.discrete)
      tries = {{256, 16, 8}, {256, 8, 16}, {256, 8, 8}, {128, 8, 8}, {128, 4, 16}, {128, 4, 8},
               {64, 4, 16},  {64, 2, 16},  {64, 2, 8},  {64, 1, 8},  {64, 1, 4}};
    else
      tries = {{64, 4, 16}, {64, 2, 16}, {64, 4, 8}, {64, 2, 8}, {64, 1, 8}, {64, 1, 4}};
    for (const auto& t : tries) {
      if (p.heads % t.hg) continue;
      Config c{{"variant", std::string("scalar")}, {"threads", t.threads}, {"heads_per_group", t.hg}, {"block_n", t.bn},
               {"splits", pick_splits(p, p.batch * (p.heads / t.hg), t.bn, cus)}};
      if (s.admits(c)) return c;
    }
    auto all = s.enumerate();
    if (all.empty()) throw SelectionError("mla_decode vulkan: no config fits " + dev.id() + " for " + inv.signature());
    return all.front();
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    auto& dev = vulkan::vulkan_device(device);
    const DeviceInfo& info = dev.info();
    const bool wide = p.dtype != DType::f32;
    if (wide && !dev.physical().storage16)
      throw InvalidArgument("mla_decode vulkan: " + info.id() + " has no 16-bit storage buffers for " +
                            std::string(to_string(p.dtype)));
    const std::string& variant = config.text("variant");
    const bool coop = variant == "coopmat";
    if (!coop && variant != "scalar")
      throw InvalidArgument("mla_decode vulkan: unknown variant '" + variant + "' (scalar, coopmat)");
    const std::int64_t splits = config.get("splits");
    // The coopmat variant's absorb and combine passes run 256 invocations a group.
    const std::int64_t threads = coop ? 256 : config.get("threads");
    const std::int64_t hg = coop ? 16 : config.get("heads_per_group"), bn = coop ? 16 : config.get("block_n");
    const std::int64_t nsg = coop ? config.get("coop_subgroups") : 0;
    auto pow2 = [](std::int64_t v) { return v > 0 && (v & (v - 1)) == 0; };
    if (coop) {
      if (!coopmat_offered(p, info))
        throw InvalidArgument("mla_decode vulkan: the coopmat variant needs an f16 cache, heads a multiple of 16, "
                              "kv_lora_rank a multiple of 64, kv_lora_rank + rope_dim of 16 and block_size of 16, and "
                              "full subgroups of 32 with 16x16x16 f16 cooperative matrices (" + info.id() + ": " +
                              info.name + ")");
      if ((nsg != 4 && nsg != 8) || p.rank % (16 * nsg) || splits <= 0 ||
          coopmat_shared(p.width(), nsg) > static_cast<std::int64_t>(info.local_mem))
        throw InvalidArgument("mla_decode vulkan: config " + config.canonical() + " needs coop_subgroups 4 or 8 (16 of them "
                              "dividing kv_lora_rank " + std::to_string(p.rank) + ") and " +
                              std::to_string(coopmat_shared(p.width(), nsg)) + " bytes of shared memory (the device has " +
                              std::to_string(info.local_mem) + ")");
    } else if (!pow2(threads) || !pow2(hg) || !pow2(bn) || splits <= 0 || p.heads % hg || p.block_size % bn) {
      throw InvalidArgument("mla_decode vulkan: config " + config.canonical() +
                            " needs powers of two for threads, heads_per_group (dividing heads " + std::to_string(p.heads) +
                            ") and block_n (dividing block_size " + std::to_string(p.block_size) + ")");
    }
    if (p.batch == 0) return;
    const auto& lim = dev.physical().limits;
    // Heads and sequences index grid dimensions of the three passes (x, y and z).
    const std::int64_t most = std::min({lim.maxComputeWorkGroupCount[0], lim.maxComputeWorkGroupCount[1],
                                        lim.maxComputeWorkGroupCount[2]});
    if (p.batch > most || p.heads > most)
      throw InvalidArgument("mla_decode vulkan: batch " + std::to_string(p.batch) + " and heads " + std::to_string(p.heads) +
                            " exceed the workgroup counts of " + info.id() + " (" + std::to_string(most) + ")");

    const std::int64_t bh = p.batch * p.heads;
    auto qs = dev.scratch(static_cast<std::size_t>(bh * p.width()) * 4);
    auto part_o = dev.scratch(static_cast<std::size_t>(bh * splits * p.rank) * 4);
    auto part_ml = dev.scratch(static_cast<std::size_t>(bh * splits * 2) * 4);

    const Push push{u32(p.heads), u32(p.nope_dim), u32(p.block_size), u32(p.max_blocks), u32(splits), u32(p.v_dim),
                    static_cast<std::uint32_t>(dtype_code(p.dtype)), static_cast<float>(p.scale), u32(p.batch)};
    // The most sequences (up to 4) whose merged o_lat and partial sums fit the combine's shared
    // memory; absorb and combine groups a warp's width of columns (threads is 64 or more).
    std::int64_t rows = 4;
    while (rows > 1 && rows * (p.rank + threads) * 4 > static_cast<std::int64_t>(info.local_mem)) rows /= 2;
    constexpr std::int64_t cols = 32;
    const std::int64_t row_groups = (p.batch + rows - 1) / rows;
    const std::string suffix = wide ? "16.spv" : ".spv";
    const std::string absorb = "mla_attention/mla_decode_absorb" + suffix;
    const std::string attend = "mla_attention/mla_decode_attend" + suffix;
    const std::string combine = "mla_attention/mla_decode_combine" + suffix;
    vulkan::Launch l;
    l.local_size = {u32(threads), 1, 1};
    l.spec = {u32(hg), u32(bn), u32(p.rank), u32(p.rope_dim), stage16(p) ? 1u : 0u, u32(rows), u32(cols), u32(cols)};
    l.push = vulkan::push_bytes(push);

    const std::int64_t local_mem = static_cast<std::int64_t>(info.local_mem);
    // The merge sums each row's parts' weights with subgroup arithmetic.
    const std::int64_t kc = coop && dev.physical().subgroup_arithmetic ? merge_coopmat_chunk(p, splits, local_mem) : 0;
    if (coop && absorb_coopmat(p, local_mem)) {
      vulkan::Launch a;
      a.spirv = "mla_attention/mla_decode_absorb_coopmat.spv";
      a.local_size = {128, 1, 1};
      a.spec = {u32(p.nope_dim), u32(p.rank), u32(p.rope_dim)};
      a.push = vulkan::push_bytes(push);
      a.buffers = {&args[arg::q_nope].buffer(), &args[arg::q_pe].buffer(), &args[arg::w_kc].buffer(), qs.get()};
      a.groups = {u32(p.rank / 64), u32(p.heads), u32((p.batch + 31) / 32)};
      a.shared_bytes = u32(absorb_coopmat_shared(p));
      a.full_subgroups = true;
      dev.dispatch(a);
    } else {
      l.spirv = absorb;
      l.buffers = {&args[arg::q_nope].buffer(), &args[arg::q_pe].buffer(), &args[arg::w_kc].buffer(), qs.get()};
      l.groups = {u32((p.rank + cols - 1) / cols), u32(p.heads), u32(row_groups)};
      l.shared_bytes = u32((rows * 16 * (threads / cols) + (threads / cols) * rows * cols) * 4);
      dev.dispatch(l);
    }

    l.buffers = {qs.get(), &args[arg::kv_cache].buffer(), &args[arg::block_tables].buffer(),
                 &args[arg::context_lens].buffer(), part_o.get(), part_ml.get()};
    l.groups = {u32(splits), u32(p.heads / hg), u32(p.batch)};
    if (coop) {
      vulkan::Launch c = l;
      c.spirv = "mla_attention/mla_decode_attend_coopmat.spv";
      c.local_size = {u32(32 * nsg), 1, 1};
      c.spec = {32, u32(nsg), u32(p.rank), u32(p.rope_dim)};
      c.shared_bytes = u32(coopmat_shared(p.width(), nsg));
      c.full_subgroups = true;
      dev.dispatch(c);
    } else {
      l.spirv = attend;
      // + 4: the staging array a config does not use still takes one word.
      l.shared_bytes = u32((hg * p.width() + hg * bn + threads + 3 * hg + 1) * 4 + bn * staged_row_bytes(p));
      dev.dispatch(l);
    }

    if (kc) {
      vulkan::Launch m;
      m.spirv = "mla_attention/mla_decode_merge_coopmat.spv";
      m.local_size = {256, 1, 1};
      const std::int64_t seqs = merge_rows(p, std::max<std::int64_t>(1, info.compute_units));
      m.spec = {u32(p.rank), u32(p.v_dim), u32(kc), u32(seqs)};
      m.push = vulkan::push_bytes(push);
      m.buffers = {part_o.get(), part_ml.get(), &args[arg::w_vc].buffer(), &args[arg::out].buffer()};
      m.groups = {u32(p.heads), u32((p.batch + seqs - 1) / seqs), 1};
      m.shared_bytes = u32(merge_coopmat_shared(p, kc));
      m.full_subgroups = true;
      dev.dispatch(m);
    } else {
      l.spirv = combine;
      l.buffers = {part_o.get(), part_ml.get(), &args[arg::w_vc].buffer(), &args[arg::out].buffer()};
      l.groups = {u32(p.heads), u32(row_groups), u32((p.v_dim + cols - 1) / cols)};
      l.shared_bytes = u32(rows * (p.rank + threads) * 4);
      dev.dispatch(l);
    }
  }
};

}  // namespace

EJK_BUILTIN(implementations, "mla_attention/vulkan") { r.add(std::make_shared<VulkanMlaDecode>()); }

}  // namespace ejk::kernels::mla_attention
