// add on OpenCL (and CUDA, which compiles the same OpenCL C): add.cl's kernel, one group per
// threads * vec elements (space.hpp). Work-items, elements per work-item and the three dtypes
// are -D options; numel and alpha are kernel arguments.
#include <memory>
#include <string>

#include "add/space.hpp"
#include "backends/clc/clc_device.hpp"
#include "common/builtin.hpp"
#include "common/dtype_code.hpp"
#include "ejk/error.hpp"

namespace ejk::kernels::add {
namespace {

constexpr const char* source_key = "add/add.cl";

class OpenCLAdd final : public clc::Implementation {
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
    check_config("add on OpenCL", config);
    if (p.numel == 0) return;
    auto& dev = clc::clc_device(device);
    const std::int64_t threads = config.get("threads"), vec = config.get("vec");
    const std::string options = " -DTHREADS=" + std::to_string(threads) + " -DVEC=" + std::to_string(vec) +
                                " -DA_T=" + std::to_string(dtype_code(p.a_dtype)) +
                                " -DB_T=" + std::to_string(dtype_code(p.b_dtype)) +
                                " -DOUT_T=" + std::to_string(dtype_code(p.out_dtype));
    const auto t = static_cast<std::size_t>(threads);
    const auto n = static_cast<std::uint32_t>(p.numel);
    const auto alpha = static_cast<float>(p.alpha);
    dev.launch(*dev.kernel(source_key, options, "add"), clc::Range(static_cast<std::size_t>(groups(p.numel, config)) * t),
               clc::Range(t), args[arg::a], args[arg::b], args[arg::out], n, alpha);
  }

 private:
  AddKernel kernel_;
};

}  // namespace

EJK_BUILTIN(implementations, "add/opencl") { clc::add<OpenCLAdd>(r); }

}  // namespace ejk::kernels::add
