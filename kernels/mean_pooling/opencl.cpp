// mean_pooling and mean_pooling_bwd on OpenCL: mean_pooling.cl's kernels.
//   forward   mean_pool, one group per (block of columns, sequence) and part of the sequence:
//             its rows of work-items stride over the part's tokens and add their sums in local
//             memory; with one part the mean is stored, else mean_pool_finish adds the parts;
//   backward  mean_pool_bwd over the same grid: dout / length written to every token of a part.
// Work-items, columns per work-item, rows and the dtype are -D options; offsets, sizes and the
// number of parts are kernel arguments, so one program serves every shape.
#include <memory>
#include <string>

#include "backends/clc/clc_device.hpp"
#include "common/builtin.hpp"
#include "ejk/error.hpp"
#include "mean_pooling/mean_pooling.hpp"
#include "mean_pooling/space.hpp"

namespace ejk::kernels::mean_pooling {
namespace {

constexpr const char* source_key = "mean_pooling/mean_pooling.cl";

class OpenCLMeanPooling final : public clc::Implementation {
 public:
  OpenCLMeanPooling(Backend backend, Direction dir) : clc::Implementation(backend), kernel_(dir) {}
  std::string_view kernel() const override { return kernel_.name(); }
  std::vector<ArgDef> args() const override { return kernel_.args(); }
  std::vector<std::string> sources() const override { return {source_key, clc::prelude_source}; }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override { return device_space(inv, dev); }
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    return device_heuristic(inv, dev, !clc::is_cpu(dev));
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    check_config(std::string(kernel()) + " on OpenCL", config);
    if (p.segs == 0 || p.dim == 0) return;
    auto& dev = clc::clc_device(device);
    const std::int64_t threads = config.get("threads"), vec = config.get("vec"), rows = config.get("rows");
    const std::int64_t splits = config.get("splits");
    const std::string options = " -DTHREADS=" + std::to_string(threads) + " -DVEC=" + std::to_string(vec) +
                                " -DROWS=" + std::to_string(rows) + " -DDTYPE=" +
                                std::to_string(p.dtype == DType::f32 ? 0 : p.dtype == DType::f16 ? 1 : 2);
    const std::int64_t blocks = ceil_div(p.dim, threads / rows * vec);
    const auto t = static_cast<std::size_t>(threads);
    const clc::Range global(static_cast<std::size_t>(blocks * p.segs) * t, static_cast<std::size_t>(splits));
    const clc::Range local(t, 1);
    const int packed = p.packed, seq = static_cast<int>(p.seq), tokens = static_cast<int>(p.tokens), segs = static_cast<int>(p.segs),
              dim = static_cast<int>(p.dim), nb = static_cast<int>(blocks), ns = static_cast<int>(splits);
    if (p.dir == Direction::backward) {
      dev.launch(*dev.kernel(source_key, options, "mean_pool_bwd"), global, local, args[arg::in], args[arg::cu_seqlens],
                 args[arg::out], packed, seq, tokens, segs, dim, nb, ns);
      return;
    }
    auto partial = dev.scratch(splits > 1 ? static_cast<std::size_t>(splits * p.segs * p.dim) * 4 : 4);
    dev.launch(*dev.kernel(source_key, options, "mean_pool"), global, local, args[arg::in], args[arg::cu_seqlens],
               args[arg::out], *partial, packed, seq, tokens, segs, dim, nb, ns);
    if (splits > 1)
      dev.launch(*dev.kernel(source_key, options, "mean_pool_finish"),
                 clc::Range(static_cast<std::size_t>(ceil_div(p.segs * p.dim, threads)) * t), clc::Range(t),
                 *partial, args[arg::cu_seqlens], args[arg::out], packed, seq, tokens, segs, dim, ns);
  }

 private:
  MeanPoolingKernel kernel_;
};

}  // namespace

EJK_BUILTIN(implementations, "mean_pooling/opencl") {
  for (Direction dir : {Direction::forward, Direction::backward}) clc::add<OpenCLMeanPooling>(r, dir);
}

}  // namespace ejk::kernels::mean_pooling
