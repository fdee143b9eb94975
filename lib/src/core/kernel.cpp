#include "ejk/kernel.hpp"

#include <algorithm>

namespace ejk {

double Kernel::tolerance(const Invocation& inv) const {
  double tol = 0;
  for (const auto& a : inv.args) tol = std::max(tol, default_tolerance(a.dtype));
  return tol;
}

Vars device_vars(const DeviceInfo& dev) {
  bool coop_f16 = std::any_of(dev.coopmat.begin(), dev.coopmat.end(),
                              [](const CoopMatShape& s) { return s.a == DType::f16; });
  return {
      {"local_mem", static_cast<std::int64_t>(dev.local_mem)},
      {"max_workgroup_size", std::int64_t{dev.max_workgroup_size}},
      {"subgroup_size", std::int64_t{dev.subgroup_size}},
      {"compute_units", std::int64_t{dev.compute_units}},
      {"fp16", std::int64_t{dev.fp16}},
      {"coopmat", std::int64_t{coop_f16}},
  };
}

}  // namespace ejk
