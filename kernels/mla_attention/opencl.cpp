// mla_decode on OpenCL: mla_decode.cl's three kernels, enqueued in order on the device's queue.
//   mla_absorb   one group per (sequence, head): q_lat = q_nope . w_kc, scaled into the log2
//                domain, q_pe appended (f32 scratch);
//   mla_attend   one group per (part of the context, group of heads, sequence): split-K over the
//                context, each staged tile of cache rows shared by the group's heads;
//   mla_combine  one group per (sequence, head): parts merged by log-sum-exp, then o_lat . w_vc.
// Tile geometry, the latent widths and whether the storage is 16-bit are -D options (they size
// local memory and registers); the dtype, head counts, the table geometry and the number of
// parts are kernel arguments, so one program serves f16 and bf16 and every batch (PoCL takes
// seconds to build each program). 16-bit tiles are staged as stored: twice the rows or heads
// fit in local memory (DeepSeek-V3 widths: 16 heads x 8 rows in 48 KiB).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/clc/clc_device.hpp"
#include "common/builtin.hpp"
#include "ejk/error.hpp"
#include "mla_attention/device_space.hpp"
#include "mla_attention/mla_attention.hpp"

namespace ejk::kernels::mla_attention {
namespace {

constexpr const char* source_key = "mla_attention/mla_decode.cl";

int dtype_code(DType t) { return t == DType::f32 ? 0 : t == DType::f16 ? 1 : 2; }

class OpenCLMlaDecode final : public clc::Implementation {
 public:
  using clc::Implementation::Implementation;
  std::string_view kernel() const override { return "mla_decode"; }
  std::vector<ArgDef> args() const override { return decode_args(); }
  std::vector<std::string> sources() const override { return {source_key, clc::prelude_source}; }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    // The group's queries, scores and reduction space in f32, and a tile as stored (rows padded
    // by one 32-bit word).
    return device_space(inv, dev,
                        "(heads_per_group * (kv_lora_rank + rope_dim) + heads_per_group * block_n + threads"
                        " + 3 * heads_per_group) * 4 + block_n * (kv_lora_rank + rope_dim + 4 / dtype_size) * dtype_size"
                        " <= local_mem");
  }

  // GPUs: the most heads per staged tile that local memory and registers allow (the cache is
  // read once per group), 256 work-items where the latent is wide. CPU drivers: 64 work-items,
  // a few heads per group, parts for every core.
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    const Problem p = Problem::of(inv);
    const ParamSpace s = space(inv, dev);
    const bool cpu = clc::is_cpu(dev);
    const std::int64_t cus = std::max<std::int64_t>(1, dev.compute_units);
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
      Config c{{"threads", t.threads}, {"heads_per_group", t.hg}, {"block_n", t.bn},
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
    const std::int64_t threads = config.get("threads"), hg = config.get("heads_per_group");
    const std::int64_t bn = config.get("block_n"), splits = config.get("splits");
    auto pow2 = [](std::int64_t v) { return v > 0 && (v & (v - 1)) == 0; };
    if (!pow2(threads) || !pow2(hg) || !pow2(bn) || splits <= 0 || p.heads % hg || p.block_size % bn)
      throw InvalidArgument("mla_decode on OpenCL: config " + config.canonical() +
                            " needs powers of two for threads, heads_per_group (dividing heads " + std::to_string(p.heads) +
                            ") and block_n (dividing block_size " + std::to_string(p.block_size) + ")");
    if (p.batch == 0) return;

    std::string options;
    auto def = [&](const char* name, std::int64_t v) { options += " -D" + std::string(name) + "=" + std::to_string(v); };
    def("THREADS", threads);
    def("HG", hg);
    def("BLOCK_N", bn);
    def("RANK", p.rank);
    def("ROPE", p.rope_dim);
    def("STAGE16", p.dtype != DType::f32);
    auto absorb = dev.kernel(source_key, options, "mla_absorb");
    auto attend = dev.kernel(source_key, options, "mla_attend");
    auto combine = dev.kernel(source_key, options, "mla_combine");

    const std::int64_t bh = p.batch * p.heads;
    auto qs = dev.scratch(static_cast<std::size_t>(bh * p.width()) * 4);
    auto part_o = dev.scratch(static_cast<std::size_t>(bh * splits * p.rank) * 4);
    auto part_ml = dev.scratch(static_cast<std::size_t>(bh * splits * 2) * 4);
    const int dtype = dtype_code(p.dtype);
    const auto t = static_cast<std::size_t>(threads);
    dev.launch(*absorb, clc::Range(static_cast<std::size_t>(bh) * t), clc::Range(t), args[arg::q_nope],
               args[arg::q_pe], args[arg::w_kc], *qs, static_cast<int>(p.heads), static_cast<int>(p.nope_dim),
               static_cast<float>(p.scale), dtype);
    dev.launch(*attend,
               clc::Range(static_cast<std::size_t>(splits) * t, static_cast<std::size_t>(p.heads / hg),
                             static_cast<std::size_t>(p.batch)),
               clc::Range(t, 1, 1), *qs, args[arg::kv_cache], args[arg::block_tables], args[arg::context_lens],
               *part_o, *part_ml, static_cast<int>(p.heads), static_cast<int>(p.block_size),
               static_cast<int>(p.max_blocks), static_cast<int>(splits), dtype);
    dev.launch(*combine, clc::Range(static_cast<std::size_t>(bh) * t), clc::Range(t), *part_o, *part_ml,
               args[arg::w_vc], args[arg::out], static_cast<int>(p.heads), static_cast<int>(splits),
               static_cast<int>(p.v_dim), dtype);
  }
};

}  // namespace

EJK_BUILTIN(implementations, "mla_attention/opencl") { clc::add<OpenCLMlaDecode>(r); }

}  // namespace ejk::kernels::mla_attention
