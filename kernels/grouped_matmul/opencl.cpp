// grouped_matmul and grouped_matmul_tgmm on OpenCL: grouped_matmul.cl's tiled GEMM.
//   gmm    grid (column tiles, row-tile slots): each group of work-items finds its (group, row
//          tile) by walking group_sizes on the device, so nothing is read back to the host;
//   tgmm   grid (column tiles, row tiles of k, groups): each reduces over its group's rows.
// Tile geometry, trans_rhs and the dtype are -D options; sizes are kernel arguments.
#include <memory>
#include <string>

#include "backends/clc/clc_device.hpp"
#include "common/builtin.hpp"
#include "ejk/error.hpp"
#include "grouped_matmul/grouped_matmul.hpp"
#include "grouped_matmul/space.hpp"

namespace ejk::kernels::grouped_matmul {
namespace {

constexpr const char* slots_key = "grouped_matmul/grouped_matmul_slots.h";
constexpr const char* source_key = "grouped_matmul/grouped_matmul.cl";

class OpenCLGroupedMatmul final : public clc::Implementation {
 public:
  OpenCLGroupedMatmul(Backend backend, Mode mode) : clc::Implementation(backend), kernel_(mode) {}
  std::string_view kernel() const override { return kernel_.name(); }
  std::vector<ArgDef> args() const override { return kernel_.args(); }
  std::vector<std::string> sources() const override { return {source_key, slots_key, clc::prelude_source}; }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override { return device_space(inv, dev); }
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    return device_heuristic(inv, dev, !clc::is_cpu(dev));
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    check_config(std::string(kernel()) + " on OpenCL", config);
    const bool gmm = p.mode == Mode::gmm;
    if (p.n == 0 || (gmm ? p.m == 0 : p.k == 0)) return;
    auto& dev = clc::clc_device(device);
    const std::int64_t tm = config.get("tile_m"), tn = config.get("tile_n"), wm = config.get("wpt_m"),
                       wn = config.get("wpt_n");
    std::string options;
    auto def = [&](const char* name, std::int64_t v) { options += " -D" + std::string(name) + "=" + std::to_string(v); };
    def("TM", tm);
    def("TN", tn);
    def("TK", config.get("tile_k"));
    def("WM", wm);
    def("WN", wn);
    def("TRANS_B", p.trans_rhs);
    def("DTYPE", p.dtype == DType::f32 ? 0 : p.dtype == DType::f16 ? 1 : 2);
    const auto rn = static_cast<std::size_t>(tn / wn), rm = static_cast<std::size_t>(tm / wm);
    const auto col_tiles = static_cast<std::size_t>(ceil_div(p.n, tn));
    const int m = static_cast<int>(p.m), n = static_cast<int>(p.n), k = static_cast<int>(p.k),
              groups = static_cast<int>(p.groups);
    if (gmm) {
      const auto slots = static_cast<std::size_t>(ceil_div(p.m, tm) + p.groups);
      dev.launch(*dev.kernel(source_key, options, "gmm"), clc::Range(col_tiles * rn, slots * rm), clc::Range(rn, rm),
                 args[arg::lhs], args[arg::rhs], args[arg::group_sizes], args[arg::out], m, n, k, groups);
    } else {
      const auto row_tiles = static_cast<std::size_t>(ceil_div(p.k, tm));
      dev.launch(*dev.kernel(source_key, options, "tgmm"),
                 clc::Range(col_tiles * rn, row_tiles * rm, static_cast<std::size_t>(p.groups)), clc::Range(rn, rm, 1),
                 args[arg::lhs], args[arg::rhs], args[arg::group_sizes], args[arg::out], m, n, k, groups);
    }
  }

 private:
  GroupedMatmulKernel kernel_;
};

}  // namespace

EJK_BUILTIN(implementations, "grouped_matmul/opencl") {
  for (Mode mode : {Mode::gmm, Mode::tgmm}) clc::add<OpenCLGroupedMatmul>(r, mode);
}

}  // namespace ejk::kernels::grouped_matmul
