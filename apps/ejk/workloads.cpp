#include "workloads.hpp"

#include <fmt/core.h>

namespace ejk::app {

namespace {

std::string amount(double bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) bytes /= 1024, ++u;
  return u ? fmt::format("{:.1f} {}", bytes, units[u]) : fmt::format("{:.0f} bytes", bytes);
}

void check_fits(const Item& item, const DeviceInfo& dev, const DeviceInfo& host) {
  const Kernel& k = Registry::global().kernel(item.invocation.kernel);
  const auto defs = k.args();
  double device_bytes = 0, host_bytes = 0;
  for (std::size_t i = 0; i < item.invocation.args.size(); ++i) {
    const TensorSpec& s = item.invocation.args[i];
    const auto elements = static_cast<double>(numel(s.shape));
    const double bytes = elements * static_cast<double>(dtype_size(s.dtype));
    if (dev.max_buffer && bytes > static_cast<double>(dev.max_buffer))
      throw InvalidArgument(fmt::format("{}: argument {} {} {} takes {}, more than {}'s largest buffer ({})", k.name(),
                                        defs[i].name, to_string(s.shape), to_string(s.dtype), amount(bytes), dev.id(),
                                        amount(static_cast<double>(dev.max_buffer))));
    device_bytes += bytes;
    host_bytes += elements * sizeof(double);
  }
  if (dev.global_mem && device_bytes > static_cast<double>(dev.global_mem))
    throw InvalidArgument(fmt::format("{}: the arguments take {}, more than {}'s memory ({})", k.name(),
                                      amount(device_bytes), dev.id(), amount(static_cast<double>(dev.global_mem))));
  if (dev.backend == Backend::cpu) host_bytes += device_bytes;  // one memory for both
  if (host.global_mem && host_bytes > static_cast<double>(host.global_mem))
    throw InvalidArgument(fmt::format("{}: the arguments take {} on the host (as doubles while they are filled and "
                                      "checked), more than its memory ({})",
                                      k.name(), amount(host_bytes), amount(static_cast<double>(host.global_mem))));
}

}  // namespace

bool is_trace(const std::string& path) {
  return path.size() >= 6 && (path.ends_with(".jsonl") || path.ends_with(".ndjson"));
}

Workset load_workset(const std::string& path, const Globals& g) {
  Workset w;
  w.source = path;
  const std::string fallback = default_device_name();
  // Where each item's device was named in the file; empty when it came from --device or the
  // environment (whose errors need no place).
  std::vector<std::string> device_where;
  if (is_trace(path)) {
    for (const auto& rec : read_trace(path)) {
      const std::string where = path + ":" + std::to_string(rec.line);
      at_place(where, [&] { Registry::global().kernel(rec.invocation.kernel).validate(rec.invocation); });
      const bool own = g.device.empty() && !rec.device.empty();
      w.items.push_back({workload_name(rec.invocation), rec.invocation, own ? rec.device : !g.device.empty() ? g.device : fallback, where});
      device_where.push_back(own ? where : "");
    }
  } else {
    Recipe r = load_recipe(path);
    const bool own = g.device.empty() && r.device != "auto";
    const std::string dev = !g.device.empty() ? g.device : own ? r.device : fallback;
    for (const auto& wl : r.workloads) {
      w.items.push_back({workload_name(wl.invocation, wl.sizes), wl.invocation, dev, wl.where});
      device_where.push_back(own ? r.device_where : "");
    }
    w.tune = r.tune;
  }
  const DeviceInfo& host = open_device("cpu")->info();
  for (std::size_t i = 0; i < w.items.size(); ++i) {
    const Item& item = w.items[i];
    std::shared_ptr<Device> dev;
    if (device_where[i].empty()) dev = open_device(item.device);
    else at_place(device_where[i], [&] { dev = open_device(item.device); });
    at_place(item.where, [&] { check_fits(item, dev->info(), host); });
  }
  return w;
}

TimingOptions run_timing() {
  TimingOptions t;
  t.min_samples = 10;
  t.max_samples = 50;
  t.max_seconds = 0.5;
  t.rerank_top = 0;
  return t;
}

}  // namespace ejk::app
