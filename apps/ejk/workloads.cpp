#include "workloads.hpp"

namespace ejk::app {

bool is_trace(const std::string& path) {
  return path.size() >= 6 && (path.ends_with(".jsonl") || path.ends_with(".ndjson"));
}

Workset load_workset(const std::string& path, const Globals& g) {
  Workset w;
  w.source = path;
  const std::string fallback = default_device_name();
  if (is_trace(path)) {
    for (const auto& rec : read_trace(path)) {
      std::string dev = !g.device.empty() ? g.device : !rec.device.empty() ? rec.device : fallback;
      w.items.push_back({workload_name(rec.invocation), rec.invocation, dev});
    }
    return w;
  }
  Recipe r = load_recipe(path);
  std::string dev = !g.device.empty() ? g.device : r.device != "auto" ? r.device : fallback;
  for (const auto& wl : r.workloads) w.items.push_back({workload_name(wl.invocation, wl.sizes), wl.invocation, dev});
  w.tune = r.tune;
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
