// attention_merge on the native CPU backend, over the device's thread pool. A task is a block of
// block_rows rows; each row's weights come from merge_weights, its elements go through f32
// scratch rows (16-bit storage widened and narrowed a row at a time, through F16C where the
// processor has it: common/convert.hpp) so that the merge itself is one vectorised loop.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "attention_merge/attention_merge.hpp"
#include "backends/cpu/cpu_device.hpp"
#include "common/builtin.hpp"
#include "common/ceil_div.hpp"
#include "common/convert.hpp"
#include "ejk/error.hpp"

namespace ejk::kernels::attention_merge {
namespace {

class CpuAttentionMerge final : public Implementation {
 public:
  std::string_view kernel() const override { return kernel_.name(); }
  Backend backend() const override { return Backend::cpu; }
  std::vector<ArgDef> args() const override { return kernel_.args(); }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    ParamSpace s;
    s.param("block_rows", {4, 16, 64, 256})
        // Of the blocks that hold every row (one task), only the smallest.
        .constraint("block_rows == 4 || block_rows / 4 < rows")
        .bind(kernel_.vars(inv))
        .bind(device_vars(dev));
    return s;
  }

  // Tasks of about 16k elements (scratch and rows in L1/L2), but at least a few per thread.
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    const Problem p = Problem::of(inv);
    const ParamSpace s = space(inv, dev);
    const std::int64_t threads = std::max<std::int64_t>(1, dev.compute_units);
    for (std::int64_t br : {256, 64, 16, 4}) {
      Config c{{"block_rows", br}};
      if (br > 4 && (br * p.head_dim > 16384 || p.rows() < 4 * threads * br)) continue;
      if (s.admits(c)) return c;
    }
    return {{"block_rows", 4}};
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    const std::int64_t br = config.get("block_rows");
    if (br <= 0) throw InvalidArgument("attention_merge cpu: config " + config.canonical() + " needs a positive block_rows");
    // Rows without elements (head_dim 0) still merge their log-sum-exps.
    if (p.rows() == 0) return;
    void* out = ejk::cpu::cpu_buffer(args[arg::out].buffer()).data();
    auto* lse = ejk::cpu::cpu_buffer(args[arg::lse].buffer()).as<float>();
    const void* part = ejk::cpu::cpu_buffer(args[arg::part].buffer()).data();
    const auto* part_lse = ejk::cpu::cpu_buffer(args[arg::part_lse].buffer()).as<float>();
    const std::int64_t D = p.head_dim, rows = p.rows();
    ejk::cpu::cpu_device(device).pool().parallel_for(ceil_div(rows, br), [&](std::int64_t task) {
      thread_local std::vector<float> acc, add;
      acc.resize(static_cast<std::size_t>(D));
      add.resize(static_cast<std::size_t>(D));
      for (std::int64_t r = task * br; r < std::min(rows, (task + 1) * br); ++r) {
        const std::int64_t li = p.lse_index(r);
        const Weights w = merge_weights(lse[li], part_lse[li]);
        if (w.wa < 0) continue;
        lse[li] = w.lse;
        float* a = acc.data();
        const float wa = w.wa, wc = w.wc;
        if (wa != 0) {
          widen(out, p.out_dtype, r * D, D, a);
          for (std::int64_t i = 0; i < D; ++i) a[i] *= wa;
        } else {
          std::fill_n(a, D, 0.f);
        }
        if (wc != 0) {
          float* c = add.data();
          widen(part, p.part_dtype, r * D, D, c);
          for (std::int64_t i = 0; i < D; ++i) a[i] += c[i] * wc;
        }
        narrow(a, D, out, p.out_dtype, r * D);
      }
    });
  }

 private:
  AttentionMergeKernel kernel_;
};

}  // namespace

EJK_BUILTIN(implementations, "attention_merge/cpu") { r.add(std::make_shared<CpuAttentionMerge>()); }

}  // namespace ejk::kernels::attention_merge
