#include "add/space.hpp"

#include <algorithm>
#include <string>

#include "ejk/error.hpp"

namespace ejk::kernels::add {

ParamSpace device_space(const Invocation& inv, const DeviceInfo& dev) {
  const AddKernel k;
  ParamSpace s;
  s.param("threads", {64, 128, 256})
      .param("vec", {1, 2, 4})
      .constraint("threads <= max_workgroup_size")
      .bind(k.vars(inv))
      .bind(device_vars(dev));
  return s;
}

Config device_heuristic(const Invocation& inv, const DeviceInfo& dev, bool gpu) {
  const Problem p = Problem::of(inv);
  const ParamSpace s = device_space(inv, dev);
  const std::int64_t want = (gpu ? 4 : 2) * std::max<std::int64_t>(1, dev.compute_units);
  Config fallback;
  for (std::int64_t threads : {256, 128, 64}) {
    const Config c{{"threads", threads}, {"vec", 4}};
    if (!s.admits(c)) continue;
    if (groups(p.numel, c) >= want) return c;
    fallback = c;  // the smallest admitted: the most groups a small tensor can have
  }
  if (!fallback.empty()) return fallback;
  auto all = s.enumerate();
  if (all.empty()) throw SelectionError(inv.kernel + ": no config fits " + dev.id() + " for " + inv.signature());
  return all.front();
}

void check_config(std::string_view where, const Config& c) {
  const std::int64_t threads = c.get("threads"), vec = c.get("vec");
  if (threads < 1 || threads > 1024 || (vec != 1 && vec != 2 && vec != 4))
    throw InvalidArgument(std::string(where) + ": config " + c.canonical() + " needs threads 1..1024 and vec 1, 2 or 4");
}

}  // namespace ejk::kernels::add
