#include "select/nearest.hpp"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

namespace ejk::select {

double log_distance(const Invocation& a, const Invocation& b) {
  if (a.options != b.options || a.args.size() != b.args.size()) return INFINITY;
  double d = 0;
  for (std::size_t i = 0; i < a.args.size(); ++i) {
    const auto &x = a.args[i], &y = b.args[i];
    if (x.dtype != y.dtype || x.shape.size() != y.shape.size()) return INFINITY;
    for (std::size_t j = 0; j < x.shape.size(); ++j)
      d += std::abs(std::log(static_cast<double>(std::max<std::int64_t>(x.shape[j], 1))) -
                    std::log(static_cast<double>(std::max<std::int64_t>(y.shape[j], 1))));
  }
  return d;
}

std::string differences(const Kernel& kernel, const Invocation& stored, const Invocation& wanted) {
  std::string out;
  try {
    Vars a = kernel.vars(stored), b = kernel.vars(wanted);
    for (const auto& [name, value] : a) {
      auto it = b.find(name);
      if (it == b.end() || it->second == value) continue;
      out += (out.empty() ? "" : ", ") + name + " " + to_string(value) + " for " + to_string(it->second);
    }
  } catch (const std::exception&) {
  }
  if (!out.empty()) return out;
  for (std::size_t i = 0; i < stored.args.size() && i < wanted.args.size(); ++i)
    if (stored.args[i].shape != wanted.args[i].shape)
      out += (out.empty() ? "arg " : ", arg ") + std::to_string(i) + " " + to_string(stored.args[i].shape) + " for " +
             to_string(wanted.args[i].shape);
  return out;
}

Invocation invocation_of(const std::string& kernel, const std::string& signature) {
  nlohmann::json sig = nlohmann::json::parse(signature);
  sig["kernel"] = kernel;
  return Invocation::from_json(sig);
}

}  // namespace ejk::select
