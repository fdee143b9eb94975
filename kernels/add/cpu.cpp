// add on the native CPU backend, over the device's thread pool. A task is a block of `block`
// elements, run a chunk at a time through f32 scratch (common/convert.hpp widens and narrows
// 16-bit storage), so that the arithmetic is one vectorised loop. A chunk is read whole before
// it is written, so out may be a or b.
#include <algorithm>
#include <memory>
#include <string>

#include "add/add.hpp"
#include "backends/cpu/cpu_device.hpp"
#include "common/builtin.hpp"
#include "common/ceil_div.hpp"
#include "common/convert.hpp"
#include "ejk/error.hpp"

namespace ejk::kernels::add {
namespace {

constexpr std::int64_t chunk = 1024;  // scratch elements: two arrays of 4 KiB, in L1

class CpuAdd final : public Implementation {
 public:
  std::string_view kernel() const override { return kernel_.name(); }
  Backend backend() const override { return Backend::cpu; }
  std::vector<ArgDef> args() const override { return kernel_.args(); }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    ParamSpace s;
    s.param("block", {4096, 16384, 65536, 262144})
        // Of the blocks that hold every element (one task), only the smallest.
        .constraint("block == 4096 || block / 4 < n")
        .bind(kernel_.vars(inv))
        .bind(device_vars(dev));
    return s;
  }

  // The largest block that still gives every thread four tasks (the pool balances by task).
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    const Problem p = Problem::of(inv);
    const std::int64_t threads = std::max<std::int64_t>(1, dev.compute_units);
    for (std::int64_t block : {262144, 65536, 16384})
      if (p.numel >= 4 * threads * block) return {{"block", block}};
    return {{"block", 4096}};
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    const std::int64_t block = config.get("block");
    if (block <= 0 || block % chunk != 0)
      throw InvalidArgument("add cpu: config " + config.canonical() + " needs a positive multiple of " + std::to_string(chunk));
    if (p.numel == 0) return;
    const void* a = ejk::cpu::cpu_buffer(args[arg::a].buffer()).data();
    const void* b = p.reads_b() ? ejk::cpu::cpu_buffer(args[arg::b].buffer()).data() : nullptr;
    void* out = ejk::cpu::cpu_buffer(args[arg::out].buffer()).data();
    const auto alpha = static_cast<float>(p.alpha);
    const std::int64_t n = p.numel;
    ejk::cpu::cpu_device(device).pool().parallel_for(ceil_div(n, block), [&](std::int64_t task) {
      float x[chunk], y[chunk];
      for (std::int64_t i = task * block; i < std::min(n, (task + 1) * block); i += chunk) {
        const std::int64_t m = std::min(chunk, n - i);
        widen(a, p.a_dtype, i, m, x);
        if (b) {
          widen(b, p.b_dtype, i, m, y);
          for (std::int64_t j = 0; j < m; ++j) x[j] += alpha * y[j];
        }
        narrow(x, m, out, p.out_dtype, i);
      }
    });
  }

 private:
  AddKernel kernel_;
};

}  // namespace

EJK_BUILTIN(implementations, "add/cpu") { r.add(std::make_shared<CpuAdd>()); }

}  // namespace ejk::kernels::add
