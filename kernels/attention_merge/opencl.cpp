// attention_merge on OpenCL: attention_merge.cl's kernel, one group per rows_per_group rows
// (space.hpp). Work-items, elements per work-item and both dtypes are -D options; sizes are
// kernel arguments, so one program serves every shape.
#include <memory>
#include <string>

#include "attention_merge/space.hpp"
#include "backends/clc/clc_device.hpp"
#include "common/builtin.hpp"
#include "common/dtype_code.hpp"
#include "ejk/error.hpp"

namespace ejk::kernels::attention_merge {
namespace {

constexpr const char* source_key = "attention_merge/attention_merge.cl";

class OpenCLAttentionMerge final : public clc::Implementation {
 public:
  using clc::Implementation::Implementation;
  std::string_view kernel() const override { return kernel_.name(); }
  std::vector<ArgDef> args() const override { return kernel_.args(); }
  std::vector<std::string> sources() const override { return {source_key, clc::prelude_source}; }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override { return device_space(inv, dev); }
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    return device_heuristic(inv, dev, !clc::is_cpu(dev));
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    check_config("attention_merge on OpenCL", config, p);
    if (p.rows() == 0) return;
    auto& dev = clc::clc_device(device);
    const std::int64_t threads = config.get("threads"), vec = config.get("vec");
    const std::string options = " -DTHREADS=" + std::to_string(threads) + " -DVEC=" + std::to_string(vec) +
                                " -DOUT_T=" + std::to_string(dtype_code(p.out_dtype)) +
                                " -DPART_T=" + std::to_string(dtype_code(p.part_dtype));
    const std::int64_t rpg = rows_per_group(threads, vec, p.head_dim);
    const auto t = static_cast<std::size_t>(threads);
    const int rows = static_cast<int>(p.rows()), seq = static_cast<int>(p.seq), heads = static_cast<int>(p.heads),
              dim = static_cast<int>(p.head_dim), per_group = static_cast<int>(rpg);
    dev.launch(*dev.kernel(source_key, options, "attention_merge"),
               clc::Range(static_cast<std::size_t>(ceil_div(p.rows(), rpg)) * t), clc::Range(t), args[arg::out],
               args[arg::lse], args[arg::part], args[arg::part_lse], rows, seq, heads, dim, per_group);
  }

 private:
  AttentionMergeKernel kernel_;
};

}  // namespace

EJK_BUILTIN(implementations, "attention_merge/opencl") { clc::add<OpenCLAttentionMerge>(r); }

}  // namespace ejk::kernels::attention_merge
