// flash_attention and flash_attention_bwd on Vulkan: the scalar tiled design of
// flash_attention.glsl (one module per pass; "16" modules read and write f16/bf16 through 16-bit
// storage buffers, the others only f32 so that devices without 16-bit storage still run f32).
// Forward: one workgroup per (query block, head, sequence), online softmax. Backward,
// FlashAttention-2 style without atomics: prep (delta = dout . out, dsoftmax_aux shares), dk/dv by
// key block iterating the query blocks (P recomputed from lse), dq by query block, then fixed-order
// reductions for a broadcast dbias and for dsoftmax_aux. Options, head_dim and the storage dtype
// are push constants; tile geometry and a head_dim size class are specialization constants, so a
// few pipelines serve many invocations (a driver compiles each pipeline once, and CPU drivers
// such as lavapipe take seconds for each).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <regex>
#include <string>

#include "backends/vulkan/vulkan_device.hpp"
#include "common/builtin.hpp"
#include "common/ceil_div.hpp"
#include "common/vulkan_coopmat.hpp"
#include "common/vulkan_fragment_rows.hpp"
#include "ejk/error.hpp"
#include "flash_attention/flash_attention.hpp"
#include "flash_attention/program.hpp"
#include "flash_attention/vulkan.hpp"

namespace ejk::kernels::flash_attention {
namespace {

// Mirrors the shader's push-constant block: the programs' options, then the first workgroup of a
// dispatch (large grids are split).
struct Push {
  ProgramOptions o;
  std::uint32_t group_x = 0, group_y = 0, group_z = 0;
};
static_assert(sizeof(Push) == 116, "the shader's block is 29 words");

std::uint32_t u32(std::int64_t v) { return static_cast<std::uint32_t>(v); }

// The same limits as the space's constraints, for configs that reach run() without it.
TileGeometry geometry(const Config& c, const Problem& p, const DeviceInfo& info) {
  TileGeometry g{c.get("block_q"), c.get("block_k"), c.get("threads_x"), c.get("threads_y"), head_dim_class(p.head_dim)};
  const std::string text = "flash_attention vulkan: config " + c.canonical() + " ";
  if (g.bq <= 0 || g.bk <= 0 || g.rx <= 0 || g.ry <= 0)
    throw InvalidArgument(text + "needs positive block_q, block_k, threads_x, threads_y");
  if (g.bq % g.ry != 0 || g.bk % g.rx != 0 || (p.backward && g.bk % g.ry != 0))
    throw InvalidArgument(text + "needs block_q % threads_y == 0, block_k % threads_x == 0" +
                          (p.backward ? " and block_k % threads_y == 0" : ""));
  if (g.rx * g.ry > info.max_workgroup_size)
    throw InvalidArgument(text + "exceeds the device's workgroup size " + std::to_string(info.max_workgroup_size));
  const std::int64_t shared = p.backward ? std::max(g.dkdv_bytes(), g.dq_bytes()) : g.forward_bytes();
  if (shared > static_cast<std::int64_t>(info.local_mem))
    throw InvalidArgument(text + "needs " + std::to_string(shared) + " bytes of shared memory for head_dim " +
                          std::to_string(p.head_dim) + ", the device has " + std::to_string(info.local_mem));
  return g;
}

bool needs16(const Problem& p) {
  return p.dtype != DType::f32 || (p.has_bias && p.bias_dtype != DType::f32) ||
         (p.has_sinks && p.sinks_dtype != DType::f32);
}

// Dispatches `groups` workgroups, split where they exceed the device's counts; the shader adds
// the push constants' group offsets.
void launch(vulkan::VulkanDevice& dev, vulkan::Launch& l, Push push, std::int64_t gx, std::int64_t gy, std::int64_t gz) {
  if (gx <= 0 || gy <= 0 || gz <= 0) return;
  const auto& lim = dev.physical().limits;
  for (std::int64_t z = 0; z < gz; z += lim.maxComputeWorkGroupCount[2])
    for (std::int64_t y = 0; y < gy; y += lim.maxComputeWorkGroupCount[1])
      for (std::int64_t x = 0; x < gx; x += lim.maxComputeWorkGroupCount[0]) {
        push.group_x = u32(x);
        push.group_y = u32(y);
        push.group_z = u32(z);
        l.groups = {u32(std::min<std::int64_t>(gx - x, lim.maxComputeWorkGroupCount[0])),
                    u32(std::min<std::int64_t>(gy - y, lim.maxComputeWorkGroupCount[1])),
                    u32(std::min<std::int64_t>(gz - z, lim.maxComputeWorkGroupCount[2]))};
        l.push = vulkan::push_bytes(push);
        dev.dispatch(l);
      }
}

std::string module(const char* pass, bool wide) {
  return std::string("flash_attention/flash_attention_") + pass + (wide ? "16" : "") + ".spv";
}

// The cooperative-matrix passes (flash_attention_fwd_coopmat.comp, flash_attention_bwd_coopmat.glsl)
// need f16 q, k, v, a head_dim that is a multiple of 16, 16x16x16 f16 x f16 -> f32 fragments, and
// subgroups of 16, 32 or 64.
bool coopmat_offered(const Problem& p, const DeviceInfo& dev) {
  return p.dtype == DType::f16 && p.head_dim % 16 == 0 && f16_fragments(dev, {16, 32, 64});
}

void require_coopmat(const Problem& p, const DeviceInfo& info, const std::string& text) {
  if (!coopmat_offered(p, info))
    throw InvalidArgument(text + "needs f16 q, k, v with head_dim a multiple of 16 and a device with 16x16x16 f16 "
                          "cooperative matrices, 16-bit storage, float16 and full subgroups of 16, 32 or 64 (" +
                          info.id() + ": " + info.name + ")");
}

// Shared memory of the cooperative-matrix forward (its hs and fs arrays), with the softmax in
// registers or through shared memory.
std::int64_t coopmat_shared(std::int64_t subgroups, std::int64_t bk, std::int64_t d, std::int64_t sg, std::int64_t stages,
                            bool registers) {
  const std::int64_t rows = 16 * subgroups;
  const std::int64_t halves = std::max(rows * (d + 8), stages * 2 * bk * (d + 8)) + (registers ? 0 : rows * (bk + 8));
  const std::int64_t floats = registers ? subgroups * 256 + 256 : rows * bk + rows * (sg / 16) + rows;
  return halves * 2 + (floats + 3) / 4 * 16;
}

// Shared memory of the cooperative-matrix backward's passes (flash_attention_bwd_coopmat.glsl):
// dk/dv with 16 subgroups keys and query tiles of bq, dq with 16 subgroups queries and key blocks
// of bk.
std::int64_t coopmat_dkdv_shared(std::int64_t subgroups, std::int64_t bq, std::int64_t d) {
  return 2 * (2 * 16 * subgroups + 2 * bq) * (d + 8) + (2 * bq + 256 + subgroups * 256 + 3) / 4 * 16;
}
std::int64_t coopmat_dq_shared(std::int64_t subgroups, std::int64_t bk, std::int64_t d) {
  return 2 * std::max(2 * 16 * subgroups, 2 * bk) * (d + 8) + (2 * 16 * subgroups + 256 + subgroups * 256 + 3) / 4 * 16;
}

// The probe's lanes of the device's fragment rows.
std::uint32_t row_lanes(const DeviceInfo& dev) { return fragment_rows(dev).lanes; }

const char* const scalar_v = "variant == \"scalar\"";
const char* const coop_v = "variant == \"coopmat\"";

}  // namespace

void add_vulkan_params(ParamSpace& s, std::vector<Value> variants, const Problem& p, const DeviceInfo& dev,
                       const TileNames& names) {
  const bool backward = p.backward;
  const auto& lim = vulkan::physical_device(dev.index).limits;
  const bool coop = coopmat_offered(p, dev);
  // The constraints below name the scalar tile block_q and block_k; other names replace them
  // as whole words.
  const std::regex tq("\\bblock_q\\b"), tk("\\bblock_k\\b");
  auto n = [&](const std::string& text) {
    return std::regex_replace(std::regex_replace(text, tq, names.q), tk, names.k);
  };
  // The shader's DS, the padded shared row stride.
  const std::string ds = "(((head_dim_class + threads_x - 1) / threads_x) * threads_x + 1)";
  const std::string wd = "((head_dim_class + threads_x - 1) / threads_x)";
  // Naming the scalar variant keeps the scalar configs of both kernels interchangeable.
  variants.push_back(std::string("scalar"));
  if (coop) variants.push_back(std::string("coopmat"));
  s.param("variant", variants)
      .param(names.q, {8, 16, 32, 64}, scalar_v)
      .param(names.k, {8, 16, 32, 64}, scalar_v)
      .param("threads_x", {4, 8, 16, 32}, scalar_v)
      .param("threads_y", {2, 4, 8, 16}, scalar_v)
      .constraint(n("block_q % threads_y == 0 && block_k % threads_x == 0"))
      .constraint("threads_x * threads_y >= 32 && threads_x * threads_y <= max_workgroup_size")
      .constraint("threads_x <= max_workgroup_x && threads_y <= max_workgroup_y")
      // Blocks much longer than the sequences only compute padding.
      .constraint(n("block_q == 8 || block_q < 2 * seq_q"))
      .constraint(n("block_k == 8 || block_k < 2 * seq_k"))
      // Score tiles and output rows per invocation stay in registers.
      .constraint(n("(block_q / threads_y) * (block_k / threads_x) <= 32"))
      .constraint(n("(block_q / threads_y) * " + wd + " <= 64"));
  if (backward) {
    s.constraint(n("block_k % threads_y == 0"))
        .constraint(n("2 * (block_k / threads_y) * " + wd + " <= 128"))
        .constraint(n("4 * max(2 * block_k * " + ds + " + block_q * " + ds + " + 2 * block_q * (block_k + 1) + 2 * block_q, " +
                      "2 * block_q * " + ds + " + block_k * " + ds + " + block_q * (block_k + 1) + 2 * block_q) <= local_mem"));
  } else {
    s.constraint(n("4 * (block_q * " + ds + " + block_k * " + ds + " + block_q * (block_k + 1) + block_q * threads_x) <= local_mem"));
  }
  if (coop && backward) {
    // Both passes' workgroups of 16-row subgroups (dk/dv: 16 keys each, dq: 16 queries each);
    // the dk/dv pass's query tiles and the dq pass's key blocks of 16 to 64.
    s.param("subgroups", {1, 2, 4, 8}, coop_v)
        .param("coop_block_q", {16, 32, 64}, coop_v)
        .param("coop_block_k", {16, 32, 64}, coop_v)
        .constraint("subgroup_size * subgroups <= max_workgroup_size && subgroup_size * subgroups <= max_workgroup_x")
        .constraint("subgroups == 1 || 16 * subgroups < 2 * max(seq_q, seq_k)")
        .constraint("coop_block_q == 16 || coop_block_q < 2 * seq_q")
        .constraint("coop_block_k == 16 || coop_block_k < 2 * seq_k")
        .constraint("2 * (2 * 16 * subgroups + 2 * coop_block_q) * (head_dim + 8) + "
                    "16 * ((2 * coop_block_q + 256 + subgroups * 256 + 3) / 4) <= local_mem")
        .constraint("2 * max(2 * 16 * subgroups, 2 * coop_block_k) * (head_dim + 8) + "
                    "16 * ((2 * 16 * subgroups + 256 + subgroups * 256 + 3) / 4) <= local_mem");
  } else if (coop) {
    // Subgroups of 16 query rows each; key blocks of 16 to 64; one or two buffers of k and v; the
    // softmax in registers where the device's fragment layout allows it (fragment_row_lanes,
    // kernels/common/vulkan_fragment_rows.hpp), else through shared memory. Shared memory as
    // coopmat_shared() counts it.
    const std::string room = "2 * max(16 * subgroups * (head_dim + 8), coop_stages * 2 * coop_block_k * (head_dim + 8))";
    s.param("subgroups", {1, 2, 4, 8}, coop_v)
        .param("coop_block_k", {16, 32, 64}, coop_v)
        .param("coop_stages", {1, 2}, coop_v)
        .param("coop_softmax", {std::string("registers"), std::string("shared")}, coop_v)
        .constraint("subgroup_size * subgroups <= max_workgroup_size && subgroup_size * subgroups <= max_workgroup_x")
        .constraint("subgroups == 1 || 16 * subgroups < 2 * seq_q")
        .constraint("coop_block_k == 16 || coop_block_k < 2 * seq_k")
        .constraint("coop_stages == 1 || coop_block_k < seq_k")
        .constraint("coop_softmax == \"shared\" || fragment_row_lanes > 0")
        .constraint("coop_softmax == \"shared\" || " + room + " + 16 * ((subgroups * 256 + 256 + 3) / 4) <= local_mem")
        .constraint("coop_softmax == \"registers\" || " + room + " + 2 * 16 * subgroups * (coop_block_k + 8)" +
                    " + 16 * ((16 * subgroups * (coop_block_k + subgroup_size / 16 + 1) + 3) / 4) <= local_mem")
        .bind({{"fragment_row_lanes", std::int64_t{row_lanes(dev)}}});
  }
  s.bind({{"head_dim_class", head_dim_class(p.head_dim)},
          {"max_workgroup_x", std::int64_t{lim.maxComputeWorkGroupSize[0]}},
          {"max_workgroup_y", std::int64_t{lim.maxComputeWorkGroupSize[1]}}});
}

std::vector<Config> vulkan_candidates(const DeviceInfo& dev, bool backward, const TileNames& names) {
  auto cfg = [&](std::int64_t bq, std::int64_t bk, std::int64_t rx, std::int64_t ry) {
    return Config{{"variant", std::string("scalar")}, {names.q, bq}, {names.k, bk}, {"threads_x", rx}, {"threads_y", ry}};
  };
  // Large tiles first on GPUs, where they cut the re-reads of k and v; modest ones on CPU
  // implementations (lavapipe), whose workgroups run as loops over SIMD lanes and gain little
  // from more invocations.
  if (vulkan::physical_device(dev.index).cpu)
    return {cfg(32, 32, 8, 4), cfg(16, 32, 8, 4), cfg(16, 16, 8, 4), cfg(8, 16, 8, 4), cfg(8, 8, 8, 4), cfg(8, 8, 4, 8)};
  if (backward) {
    auto coop = [](std::int64_t subgroups, std::int64_t bq, std::int64_t bk) {
      return Config{{"variant", std::string("coopmat")}, {"subgroups", subgroups}, {"coop_block_q", bq}, {"coop_block_k", bk}};
    };
    // On the H200 (B4 H16 S4096 D128) 4 x 16 keys (dk/dv) and queries (dq) with 16-row tiles and
    // blocks won a tune of every config of 2 to 8 subgroups (bench/results/h200-2026-11-28c/).
    return {coop(4, 16, 16), coop(2, 16, 16), cfg(16, 32, 16, 8), cfg(16, 16, 16, 8),
            cfg(8, 16, 16, 8), cfg(8, 8, 8, 8), cfg(8, 8, 4, 8)};
  }
  // Tensor cores where the space offers them (f16, head_dim a multiple of 16).
  auto coop = [](std::int64_t subgroups, std::int64_t bk, std::int64_t stages, const char* softmax) {
    return Config{{"variant", std::string("coopmat")}, {"subgroups", subgroups}, {"coop_block_k", bk},
                  {"coop_stages", stages}, {"coop_softmax", std::string(softmax)}};
  };
  // On the H200 (B4 H16 S4096 D128) 8 x 16 rows with 16-key blocks and the softmax in registers
  // won a tune of the register configs (bench/results/h200-2026-11-28b/fa-reg4); the shared
  // softmax's best before that was 2 x 16 rows, 16-key blocks.
  return {coop(8, 16, 1, "registers"), coop(4, 16, 1, "registers"), coop(2, 16, 1, "shared"),
          cfg(32, 32, 16, 8), cfg(16, 32, 16, 8), cfg(16, 16, 16, 8), cfg(8, 16, 16, 8), cfg(8, 8, 8, 8), cfg(8, 8, 4, 8)};
}

namespace {

ParamSpace vulkan_space(const Invocation& inv, const DeviceInfo& dev, bool backward) {
  const Vars vars = backward ? FlashAttentionBwdKernel().vars(inv) : FlashAttentionKernel().vars(inv);
  ParamSpace s;
  add_vulkan_params(s, {}, Problem::of(inv), dev);
  s.bind(vars).bind(device_vars(dev));
  return s;
}

// The first candidate the space admits.
Config vulkan_heuristic(const Invocation& inv, const DeviceInfo& dev, bool backward, const Implementation& impl) {
  ParamSpace space = impl.space(inv, dev);
  for (const auto& c : vulkan_candidates(dev, backward))
    if (space.admits(c)) return c;
  auto all = space.enumerate();
  if (all.empty()) throw SelectionError("flash_attention vulkan: no config fits " + dev.id() + " for " + inv.signature());
  return all.front();
}

vulkan::VulkanDevice& device_for(const Problem& p, Device& device) {
  auto& dev = vulkan::vulkan_device(device);
  if (needs16(p) && !dev.physical().storage16)
    throw InvalidArgument("flash_attention vulkan: " + dev.info().id() + " has no 16-bit storage buffers for f16/bf16 arrays");
  check_32bit_indices(p, p.backward ? "flash_attention_bwd vulkan" : "flash_attention vulkan");
  return dev;
}

// SPARSE modules (flash_attention.glsl) take the layout's blocks as constants 9 and 10 after the
// pass's own (8: the cooperative-matrix forward's STAGES, unused by the others) and the lists
// after the pass's arrays.
void walk(vulkan::Launch& l, const BlockLists* lists, bool backward) {
  if (!lists) return;
  if (l.spec.size() < 8) l.spec.resize(8, 1);
  l.spec[6] = u32(lists->block_q);
  l.spec[7] = u32(lists->block_k);
  l.buffers.push_back(&lists->kv_counts->buffer());
  l.buffers.push_back(&lists->kv_indices->buffer());
  if (backward) {
    l.buffers.push_back(&lists->q_counts->buffer());
    l.buffers.push_back(&lists->q_indices->buffer());
  }
}

// SPARSE modules read through 16-bit storage only.
std::string pass_module(const char* pass, bool wide, const BlockLists* lists) {
  return lists ? std::string("flash_attention/flash_attention_") + pass + "_sparse16.spv" : module(pass, wide);
}

void run_coopmat(const Problem& p, const Config& config, std::span<const Tensor> args, vulkan::VulkanDevice& dev,
                 const BlockLists* lists) {
  const DeviceInfo& info = dev.info();
  const std::string text = "flash_attention vulkan: config " + config.canonical() + " ";
  require_coopmat(p, info, text);
  // Configs from before pipeline stages and the register softmax existed have one stage and the
  // shared softmax.
  const std::int64_t nsg = config.get("subgroups"), bk = config.get("coop_block_k"), sg = info.subgroup_size,
                     stages = config.has("coop_stages") ? config.get("coop_stages") : 1;
  const std::string softmax = config.has("coop_softmax") ? config.text("coop_softmax") : "shared";
  if (nsg <= 0 || bk <= 0 || bk % 16 != 0 || bk % (2 * (sg / 16)) != 0 || (stages != 1 && stages != 2))
    throw InvalidArgument(text + "needs positive subgroups, coop_block_k a positive multiple of 16 and coop_stages 1 or 2");
  if (softmax != "registers" && softmax != "shared")
    throw InvalidArgument(text + "needs coop_softmax \"registers\" or \"shared\"");
  if (sg * nsg > info.max_workgroup_size)
    throw InvalidArgument(text + "exceeds the device's workgroup size " + std::to_string(info.max_workgroup_size));
  const FragmentRows rows = softmax == "registers" ? fragment_rows(dev) : FragmentRows{};
  if (softmax == "registers" && rows.lanes == 0)
    throw InvalidArgument(text + "needs a device whose fragments keep each row on an aligned group of invocations "
                          "for coop_softmax \"registers\" (" + info.id() + ": " + info.name + "); \"shared\" runs anywhere");
  const std::int64_t shared = coopmat_shared(nsg, bk, p.head_dim, sg, stages, rows.lanes > 0);
  if (shared > static_cast<std::int64_t>(info.local_mem))
    throw InvalidArgument(text + "needs " + std::to_string(shared) + " bytes of shared memory for head_dim " +
                          std::to_string(p.head_dim) + ", the device has " + std::to_string(info.local_mem));
  vulkan::Launch l;
  l.spirv = lists ? "flash_attention/flash_attention_fwd_coopmat_sparse.spv" : "flash_attention/flash_attention_fwd_coopmat.spv";
  l.local_size = {u32(sg * nsg), 1, 1};
  // The shared constants: BQ = 16 subgroups, BK, DMAX = head_dim, RX = subgroup size, RY = subgroups;
  // then the shader's own STAGES, SPARSE's blocks (walk) and the fragment's rows.
  l.spec = {u32(16 * nsg), u32(bk), u32(p.head_dim), u32(sg), u32(nsg), u32(stages), 1, 1, rows.lanes, rows.first_lo,
            rows.first_hi};
  for (std::size_t i = 0; i < fwd::count; ++i) l.buffers.push_back(&args[i].buffer());
  walk(l, lists, false);
  l.shared_bytes = u32(shared);
  l.full_subgroups = true;
  Push push{program_options(p, "flash_attention vulkan")};
  if (lists) push.o.flags |= lists->flags();
  launch(dev, l, push, ceil_div(p.seq_q, 16 * nsg), p.heads, p.batch);
}

// The cooperative-matrix backward's config, checked as the space checks it.
struct CoopBackward {
  std::int64_t subgroups = 0, block_q = 0, block_k = 0;
};

CoopBackward coop_backward(const Problem& p, const Config& config, const DeviceInfo& info) {
  const std::string text = "flash_attention_bwd vulkan: config " + config.canonical() + " ";
  require_coopmat(p, info, text);
  const CoopBackward c{config.get("subgroups"), config.get("coop_block_q"), config.get("coop_block_k")};
  if (c.subgroups <= 0 || c.block_q <= 0 || c.block_q % 16 != 0 || c.block_k <= 0 || c.block_k % 16 != 0)
    throw InvalidArgument(text + "needs positive subgroups and coop_block_q, coop_block_k positive multiples of 16");
  if (info.subgroup_size * c.subgroups > info.max_workgroup_size)
    throw InvalidArgument(text + "exceeds the device's workgroup size " + std::to_string(info.max_workgroup_size));
  const std::int64_t shared = std::max(coopmat_dkdv_shared(c.subgroups, c.block_q, p.head_dim),
                                       coopmat_dq_shared(c.subgroups, c.block_k, p.head_dim));
  if (shared > static_cast<std::int64_t>(info.local_mem))
    throw InvalidArgument(text + "needs " + std::to_string(shared) + " bytes of shared memory for head_dim " +
                          std::to_string(p.head_dim) + ", the device has " + std::to_string(info.local_mem));
  return c;
}

}  // namespace

void vulkan_forward(const Problem& p, const Config& config, std::span<const Tensor> args, Device& device,
                    const BlockLists* lists) {
  auto& dev = device_for(p, device);
  const std::string variant = config.has("variant") ? config.text("variant") : "scalar";
  if (variant == "coopmat") return run_coopmat(p, config, args, dev, lists);
  if (variant != "scalar") throw InvalidArgument("flash_attention vulkan: unknown variant '" + variant + "' (scalar, coopmat)");
  const TileGeometry g = geometry(config, p, dev.info());
  const bool wide = needs16(p) || dev.physical().storage16;
  const std::string spirv = pass_module("fwd", wide, lists);
  vulkan::Launch l;
  l.spirv = spirv;
  l.local_size = {u32(g.rx), u32(g.ry), 1};
  l.spec = {u32(g.bq), u32(g.bk), u32(g.d), u32(g.rx), u32(g.ry)};
  for (std::size_t i = 0; i < fwd::count; ++i) l.buffers.push_back(&args[i].buffer());
  walk(l, lists, false);
  l.shared_bytes = u32(g.forward_bytes());
  Push push{program_options(p, "flash_attention vulkan")};
  if (lists) push.o.flags |= lists->flags();
  launch(dev, l, push, ceil_div(p.seq_q, g.bq), p.heads, p.batch);
}

void vulkan_backward(const Problem& p, const Config& config, std::span<const Tensor> args, Device& device,
                     const BlockLists* lists) {
  auto& dev = device_for(p, device);
  const std::string variant = config.has("variant") ? config.text("variant") : "scalar";
  if (variant != "scalar" && variant != "coopmat")
    throw InvalidArgument("flash_attention_bwd vulkan: unknown variant '" + variant + "' (scalar, coopmat)");
  const bool coop = variant == "coopmat";
  const TileGeometry g = coop ? TileGeometry{} : geometry(config, p, dev.info());
  const CoopBackward c = coop ? coop_backward(p, config, dev.info()) : CoopBackward{};
  const bool wide = needs16(p) || dev.physical().storage16;

  // Scratch: delta per row, the prep pass's dsoftmax_aux shares, and where the bias is
  // broadcast, dbias unbroadcast in f32 (summed by the finish pass instead of atomically).
  constexpr std::int64_t prep_rows = 64, prep_lanes = 16;  // the prep shader's NT and PREP_LANES
  const std::int64_t prep_blocks = ceil_div(p.seq_q, prep_rows);
  const bool broadcast = p.has_bias && ((p.bias_batch == 1 && p.batch > 1) || (p.bias_heads == 1 && p.heads > 1));
  auto delta = dev.scratch(static_cast<std::size_t>(std::max<std::int64_t>(1, p.heads * p.total_q)) * 4);
  auto parts = dev.scratch(static_cast<std::size_t>(std::max<std::int64_t>(1, p.batch * p.heads * prep_blocks)) * 4);
  auto scratch = dev.scratch(static_cast<std::size_t>(broadcast ? p.batch * p.heads * p.seq_q * p.seq_k : 1) * 4);

  Push push{program_options(p, "flash_attention_bwd vulkan")};
  push.o.flags |= (broadcast ? program_flag::dbias_scratch : 0u) | (lists ? lists->flags() : 0u);
  push.o.extra = u32(prep_blocks);
  vulkan::Launch l;
  for (std::size_t i = 0; i < bwd::count; ++i) l.buffers.push_back(&args[i].buffer());
  l.buffers.push_back(delta.get());
  l.buffers.push_back(parts.get());
  l.buffers.push_back(scratch.get());
  const std::vector<const Buffer*> arrays = l.buffers;

  // Single-row passes: one invocation per query row (prep) or per output (finish).
  std::string spirv = module("prep", wide);
  l.spirv = spirv;
  l.local_size = {u32(prep_rows), 1, 1};
  l.spec = {1, u32(prep_rows), 32, u32(prep_rows), 1};
  l.shared_bytes = u32(prep_rows * (prep_lanes + 1) * 4);
  launch(dev, l, push, prep_blocks, p.heads, p.batch);

  // The tiled passes walk the lists where given.
  if (coop) {
    const std::string sparse = lists ? "_sparse" : "";
    const std::uint32_t rows = u32(16 * c.subgroups), sg = dev.info().subgroup_size;
    spirv = "flash_attention/flash_attention_dkdv_coopmat" + sparse + ".spv";
    l.spirv = spirv;
    l.local_size = {sg * u32(c.subgroups), 1, 1};
    l.full_subgroups = true;
    l.spec = {u32(c.block_q), rows, u32(p.head_dim), sg, u32(c.subgroups)};
    walk(l, lists, true);
    l.shared_bytes = u32(coopmat_dkdv_shared(c.subgroups, c.block_q, p.head_dim));
    launch(dev, l, push, ceil_div(p.seq_k, rows), p.kv_heads, p.batch);

    spirv = "flash_attention/flash_attention_dq_coopmat" + sparse + ".spv";
    l.spirv = spirv;
    l.spec[0] = rows;
    l.spec[1] = u32(c.block_k);
    l.shared_bytes = u32(coopmat_dq_shared(c.subgroups, c.block_k, p.head_dim));
    launch(dev, l, push, ceil_div(p.seq_q, rows), p.heads, p.batch);
    l.full_subgroups = false;
  } else {
    spirv = pass_module("dkdv", wide, lists);
    l.spirv = spirv;
    l.local_size = {u32(g.rx), u32(g.ry), 1};
    l.spec = {u32(g.bq), u32(g.bk), u32(g.d), u32(g.rx), u32(g.ry)};
    walk(l, lists, true);
    l.shared_bytes = u32(g.dkdv_bytes());
    launch(dev, l, push, ceil_div(p.seq_k, g.bk), p.kv_heads, p.batch);

    spirv = pass_module("dq", wide, lists);
    l.spirv = spirv;
    l.shared_bytes = u32(g.dq_bytes());
    launch(dev, l, push, ceil_div(p.seq_q, g.bq), p.heads, p.batch);
  }

  spirv = module("finish", wide);
  l.spirv = spirv;
  l.buffers = arrays;
  l.local_size = {u32(prep_rows), 1, 1};
  l.spec = {1, u32(prep_rows), 32, u32(prep_rows), 1};
  l.shared_bytes = u32(prep_rows * 4);
  if (p.has_sinks) launch(dev, l, push, 1, 1, 1);
  if (broadcast) {
    push.o.flags |= program_flag::finish_dbias;
    const std::int64_t n = p.bias_batch * p.bias_heads * p.seq_q * p.seq_k;
    launch(dev, l, push, std::min<std::int64_t>(ceil_div(n, prep_rows), 4096), 1, 1);
  }
}

namespace {

class VulkanBase : public Implementation {
 public:
  Backend backend() const override { return Backend::vulkan; }
  bool supports(const Invocation& inv, const DeviceInfo& dev) const override {
    const Problem p = Problem::of(inv);
    return !needs16(p) || vulkan::physical_device(dev.index).storage16;
  }
};

class VulkanForward final : public VulkanBase {
 public:
  std::string_view kernel() const override { return "flash_attention"; }
  std::vector<ArgDef> args() const override { return forward_args(); }
  std::vector<std::string> sources() const override {
    std::vector<std::string> s{module("fwd", false), module("fwd", true)};
#ifdef EJK_HAVE_COOPMAT
    s.push_back("flash_attention/flash_attention_fwd_coopmat.spv");
    s.push_back("common/rows_coopmat.spv");
#endif
    return s;
  }
  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override { return vulkan_space(inv, dev, false); }
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    return vulkan_heuristic(inv, dev, false, *this);
  }
  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    vulkan_forward(Problem::of(inv), config, args, device);
  }
};

class VulkanBackward final : public VulkanBase {
 public:
  std::string_view kernel() const override { return "flash_attention_bwd"; }
  std::vector<ArgDef> args() const override { return backward_args(); }
  std::vector<std::string> sources() const override {
    std::vector<std::string> s;
    for (const char* pass : {"prep", "dkdv", "dq", "finish"})
      for (bool wide : {false, true}) s.push_back(module(pass, wide));
#ifdef EJK_HAVE_COOPMAT
    s.push_back("flash_attention/flash_attention_dkdv_coopmat.spv");
    s.push_back("flash_attention/flash_attention_dq_coopmat.spv");
#endif
    return s;
  }
  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override { return vulkan_space(inv, dev, true); }
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    return vulkan_heuristic(inv, dev, true, *this);
  }
  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    vulkan_backward(Problem::of(inv), config, args, device);
  }
};

}  // namespace

EJK_BUILTIN(implementations, "flash_attention/vulkan") {
  r.add(std::make_shared<VulkanForward>());
  r.add(std::make_shared<VulkanBackward>());
}

}  // namespace ejk::kernels::flash_attention
