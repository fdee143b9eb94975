#include "ejk/kernel.hpp"

#include <algorithm>
#include <utility>

#include "ejk/error.hpp"
#include "ejk/registry.hpp"

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

std::vector<Fill> standard_fills(const Invocation& inv, const std::vector<ArgDef>& defs) {
  std::vector<Fill> out;
  for (std::size_t i = 0; i < inv.args.size(); ++i) {
    const TensorSpec& s = inv.args[i];
    if (i < defs.size() && defs[i].role == Role::out) out.push_back(Fill::none());
    else if (is_float(s.dtype)) out.push_back(Fill::uniform());
    else out.push_back(Fill::of(std::vector<double>(static_cast<std::size_t>(numel(s.shape)), 0.0)));
  }
  return out;
}

std::vector<Fill> Kernel::fills(const Invocation& inv, std::uint64_t /*seed*/) const {
  const auto defs = args();
  for (std::size_t i = 0; i < inv.args.size(); ++i)
    if (!(i < defs.size() && defs[i].role == Role::out) && !is_float(inv.args[i].dtype))
      throw InvalidArgument("kernel " + std::string(name()) + " does not say how to fill its integer argument " +
                            (i < defs.size() ? defs[i].name : std::to_string(i)));
  return standard_fills(inv, defs);
}

void Kernel::make_inputs(const Invocation& inv, std::uint64_t seed, std::span<const Tensor> args) const {
  const std::vector<Fill> f = fills(inv, seed);
  const auto defs = this->args();
  if (f.size() != inv.args.size() || args.size() != inv.args.size())
    throw Error("kernel " + std::string(name()) + ": " + std::to_string(f.size()) + " fills and " +
                std::to_string(args.size()) + " tensors for " + std::to_string(inv.args.size()) + " arguments");
  for (std::size_t i = 0; i < f.size(); ++i) {
    const Tensor& t = args[i];
    const std::string arg = i < defs.size() ? defs[i].name : std::to_string(i);
    switch (f[i].kind) {
      case Fill::Kind::uniform:
        fill_uniform(t, seed + (static_cast<std::uint64_t>(i) << 32), f[i].lo, f[i].hi);
        break;
      case Fill::Kind::values:
        if (static_cast<std::int64_t>(f[i].values.size()) != t.numel())
          throw Error("kernel " + std::string(name()) + " made " + std::to_string(f[i].values.size()) + " values for " +
                      arg + " " + to_string(t.shape()) + " (" + std::to_string(t.numel()) + " elements)");
        t.write(std::span<const double>(f[i].values));
        break;
      case Fill::Kind::none:
        break;
    }
  }
  derive(inv, args);
}

std::vector<std::int64_t> sample_positions(std::int64_t n, std::int64_t count) {
  std::vector<std::int64_t> out;
  if (n <= 0 || count <= 0) return out;
  if (count >= n) {
    for (std::int64_t i = 0; i < n; ++i) out.push_back(i);
    return out;
  }
  out.push_back(0);
  // Stretches between the ends; within each, a position drawn from a fixed mix of its number.
  const std::int64_t inner = count - 2;
  for (std::int64_t s = 0; s < inner; ++s) {
    const std::int64_t lo = 1 + s * (n - 2) / inner, hi = 1 + (s + 1) * (n - 2) / inner;
    if (hi <= lo) continue;
    std::uint64_t z = static_cast<std::uint64_t>(s) * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    out.push_back(lo + static_cast<std::int64_t>(z % static_cast<std::uint64_t>(hi - lo)));
  }
  if (count >= 2) out.push_back(n - 1);
  return out;
}

HostArrays Kernel::inputs(const Invocation& inv, std::uint64_t seed) const {
  auto dev = open_device("cpu");
  const std::vector<Fill> f = fills(inv, seed);
  std::vector<Tensor> t;
  for (std::size_t i = 0; i < inv.args.size(); ++i) {
    t.emplace_back(dev, inv.args[i].shape, inv.args[i].dtype);
    // What make_inputs leaves unwritten reads as zeros.
    if (i >= f.size() || f[i].kind == Fill::Kind::none) t.back().write_bytes(std::vector<std::byte>(t.back().bytes()));
  }
  make_inputs(inv, seed, t);
  dev->synchronize();
  HostArrays out;
  for (const auto& x : t) out.push_back(x.read());
  return out;
}

void run_on(std::string_view kernel, const Invocation& inv, std::span<const Tensor> args,
            std::span<const std::size_t> from, std::span<const TensorSpec> temporaries) {
  if (args.empty()) throw Error("run_on " + std::string(kernel) + ": no arguments");
  const std::shared_ptr<Device>& dev = args[0].device_ptr();
  Invocation f = inv;
  f.kernel = std::string(kernel);
  f.args.clear();
  std::vector<Tensor> t;
  std::size_t next = 0;
  for (std::size_t i : from) {
    if (i == static_cast<std::size_t>(-1)) {
      if (next >= temporaries.size()) throw Error("run_on " + std::string(kernel) + ": too few temporaries");
      t.emplace_back(dev, temporaries[next].shape, temporaries[next].dtype);
      f.args.push_back(temporaries[next++]);
    } else {
      t.push_back(args[i]);
      f.args.push_back(inv.args[i]);
    }
  }
  const Implementation& impl = Registry::global().implementation(f, dev->info());
  impl.run(f, impl.heuristic(f, dev->info()), t, *dev);
  dev->synchronize();
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
      {"static_local_mem", static_cast<std::int64_t>(dev.static_local())},
      {"max_workgroup_size", std::int64_t{dev.max_workgroup_size}},
      {"subgroup_size", std::int64_t{dev.subgroup_size}},
      {"compute_units", std::int64_t{dev.compute_units}},
      {"fp16", std::int64_t{dev.fp16}},
      {"coopmat", std::int64_t{coop_f16}},
  };
}

}  // namespace ejk
