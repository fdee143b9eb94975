#include "ejk/kernel.hpp"

#include <algorithm>
#include <random>
#include <utility>

#include "ejk/error.hpp"

namespace ejk {

void Kernel::validate(const Invocation& inv) const {
  const auto defs = args();
  const std::string kernel(name());
  if (inv.args.size() != defs.size()) {
    std::string list;
    for (const auto& d : defs) list += (list.empty() ? "" : ", ") + d.name;
    throw InvalidArgument(kernel + " takes " + std::to_string(defs.size()) + " arguments (" + list + "), got " +
                          std::to_string(inv.args.size()));
  }
  for (std::size_t i = 0; i < defs.size(); ++i)
    (void)numel(inv.args[i].shape, kernel + ": argument " + defs[i].name + " " + std::string(to_string(inv.args[i].dtype)));
  check(inv);
}

double Kernel::tolerance(const Invocation& inv) const {
  double tol = 0;
  for (const auto& a : inv.args) tol = std::max(tol, default_tolerance(a.dtype));
  return tol;
}

HostArrays Kernel::inputs(const Invocation& inv, std::uint64_t seed) const {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  HostArrays out;
  const auto defs = args();
  for (std::size_t i = 0; i < inv.args.size(); ++i) {
    const auto& spec = inv.args[i];
    if (!is_float(spec.dtype))
      throw InvalidArgument("kernel " + std::string(name()) + " does not say how to fill its integer argument " +
                            (i < defs.size() ? defs[i].name : std::to_string(i)));
    std::vector<double> v(static_cast<std::size_t>(numel(spec.shape)));
    for (auto& x : v) {
      do x = dist(rng);
      while (x == 0.0);
      x = round_to(spec.dtype, x);
    }
    out.push_back(std::move(v));
  }
  return out;
}

Invocation Kernel::from_sizes(const std::map<std::string, std::int64_t>& /*sizes*/, DType /*dtype*/,
                              const nlohmann::json& /*options*/) const {
  throw InvalidArgument("kernel " + std::string(name()) + " cannot be described by a recipe's sizes");
}

RecipeSizes::RecipeSizes(std::string kernel, const std::map<std::string, std::int64_t>& sizes,
                         const std::vector<std::string>& known, std::string list)
    : kernel_(std::move(kernel)), list_(std::move(list)), sizes_(sizes) {
  for (const auto& [name, value] : sizes) {
    if (std::find(known.begin(), known.end(), name) == known.end())
      throw InvalidArgument(kernel_ + " has no size '" + name + "' (sizes: " + list_ + ")");
    // Sizes become dimensions: bounded as dimensions are (ejk/shape.hpp), so the products a
    // kernel forms from two of them stay within 64 bits.
    if (value < 0 || value > max_dim)
      throw InvalidArgument(kernel_ + " size '" + name + "' is " + std::to_string(value) + ", outside 0 to 2^31-1");
  }
}

std::int64_t RecipeSizes::operator()(const char* name, std::int64_t fallback) const {
  auto it = sizes_.find(name);
  if (it != sizes_.end()) return it->second;
  if (fallback < 0) throw InvalidArgument(kernel_ + " needs size '" + name + "' (sizes: " + list_ + ")");
  return fallback;
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
