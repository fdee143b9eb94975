#include "report.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <fmt/core.h>

namespace ejk::app {

std::string workload_name(const Invocation& inv, const std::map<std::string, std::int64_t>& sizes) {
  std::string name = inv.kernel;
  if (!sizes.empty()) {
    // In the order the kernel declares its sizes (m, n, k), not alphabetically.
    std::vector<std::string> order = Registry::global().has(inv.kernel) ? Registry::global().kernel(inv.kernel).size_names()
                                                                        : std::vector<std::string>{};
    for (const auto& [k, v] : sizes)
      if (std::find(order.begin(), order.end(), k) == order.end()) order.push_back(k);
    for (const auto& k : order)
      if (auto it = sizes.find(k); it != sizes.end()) name += fmt::format("/{}:{}", k, it->second);
  } else {
    for (const auto& a : inv.args) {
      std::string dims;
      for (auto d : a.shape) dims += (dims.empty() ? "" : "x") + std::to_string(d);
      name += "/" + (dims.empty() ? std::string("scalar") : dims);
    }
  }
  if (!inv.args.empty()) name += "/" + std::string(to_string(inv.args.front().dtype));
  for (const auto& [k, v] : inv.options.items()) {
    if (v.is_boolean()) {
      if (v.get<bool>()) name += "/" + k;
    } else {
      name += "/" + k + ":" + (v.is_string() ? v.get<std::string>() : v.dump());
    }
  }
  return name;
}

namespace {

std::string human_time(double ns) {
  if (ns <= 0) return "-";
  if (ns < 1e3) return fmt::format("{:.0f} ns", ns);
  if (ns < 1e6) return fmt::format("{:.1f} us", ns / 1e3);
  if (ns < 1e9) return fmt::format("{:.2f} ms", ns / 1e6);
  return fmt::format("{:.2f} s", ns / 1e9);
}

std::string rate(double amount, double ns, const char* unit) {
  if (amount <= 0 || ns <= 0) return "-";
  return fmt::format("{:.1f} {}", amount / ns, unit);  // per ns = G per s
}

}  // namespace

void print_table(const std::vector<Row>& rows, bool tuning) {
  std::size_t w = 8;
  for (const auto& r : rows) w = std::max(w, r.name.size());
  if (tuning)
    fmt::print("{:<{}}  {:>10}  {:>10}  {:>7}  {:>12}  {:>9}  {}\n", "workload", w, "heuristic", "tuned", "speedup",
               "GFLOP/s", "evals", "config");
  else
    fmt::print("{:<{}}  {:>10}  {:>6}  {:>12}  {:>10}  {:<10}  {}\n", "workload", w, "median", "±IQR", "GFLOP/s", "GB/s",
               "tier", "config");
  for (const auto& r : rows) {
    if (r.status != "ok") {
      fmt::print("{:<{}}  {}: {}\n", r.name, w, r.status, r.note);
      continue;
    }
    const double t = r.stats.median_ns;
    if (tuning)
      fmt::print("{:<{}}  {:>10}  {:>10}  {:>7}  {:>12}  {:>9}  {}{}\n", r.name, w, human_time(r.heuristic_ns),
                 human_time(t), r.speedup > 0 ? fmt::format("{:.2f}x", r.speedup) : "-", rate(r.flops, t, "GFLOP/s"),
                 fmt::format("{}/{}", r.evaluations, r.space), r.config, r.note.empty() ? "" : "  (" + r.note + ")");
    else
      fmt::print("{:<{}}  {:>10}  {:>6}  {:>12}  {:>10}  {:<10}  {}\n", r.name, w, human_time(t),
                 t > 0 ? fmt::format("{:.1f}%", 100 * r.stats.iqr_ns / t) : "-", rate(r.flops, t, "GFLOP/s"),
                 rate(r.bytes, t, "GB/s"), r.tier, r.config);
  }
}

nlohmann::json benchmark_json(const DeviceInfo& device, const std::vector<Row>& rows) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S%z", std::localtime(&now));
  nlohmann::json context = {{"date", date},
                            {"host_name", host},
                            {"executable", "ejk"},
                            {"num_cpus", sysconf(_SC_NPROCESSORS_ONLN)},
                            {"library_build_type", "release"},
                            {"ejk_version", std::string(tool_version())},
                            {"ejk_build", std::string(build_info())},
                            {"device", device.to_json()}};
  nlohmann::json benchmarks = nlohmann::json::array();
  for (const auto& r : rows) {
    nlohmann::json b = {{"name", r.name},
                        {"run_name", r.name},
                        {"run_type", "iteration"},
                        {"repetitions", 1},
                        {"repetition_index", 0},
                        {"threads", 1},
                        {"iterations", r.stats.n},
                        {"real_time", r.stats.median_ns / 1e3},
                        {"cpu_time", r.stats.median_ns / 1e3},
                        {"time_unit", "us"},
                        {"label", r.config},
                        {"kernel", r.kernel},
                        {"tier", r.tier},
                        {"status", r.status}};
    if (r.status != "ok") {
      b["error_occurred"] = true;
      b["error_message"] = r.note;
    }
    if (r.stats.median_ns > 0) {
      b["iqr_ns"] = r.stats.iqr_ns;
      b["min_ns"] = r.stats.min_ns;
      if (r.flops > 0) b["GFLOP/s"] = r.flops / r.stats.median_ns;
      if (r.bytes > 0) b["GB/s"] = r.bytes / r.stats.median_ns;
    }
    if (!r.samples_ns.empty()) b["samples_ns"] = r.samples_ns;
    if (!r.reason.empty()) b["reason"] = r.reason;
    if (r.evaluations > 0) {
      b["evaluations"] = r.evaluations;
      b["failures"] = r.failures;
      b["space"] = r.space;
      b["heuristic_ns"] = r.heuristic_ns;
      b["speedup"] = r.speedup;
      b["tune_seconds"] = r.seconds;
    }
    benchmarks.push_back(std::move(b));
  }
  return {{"context", context}, {"benchmarks", benchmarks}};
}

Progress::Progress(std::size_t total, bool enabled)
    : total_(total), on_(enabled && isatty(fileno(stderr))), start_(std::chrono::steady_clock::now()) {}

Progress::~Progress() { finish(); }

void Progress::step(const std::string& label) {
  if (!on_) return;
  label_ = label;
  draw();
  ++done_;
}

void Progress::draw() const {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int width = 24;
  const int filled = total_ ? static_cast<int>(width * done_ / total_) : width;
  std::string eta = "--";
  if (done_ > 0) {
    const double left = elapsed / static_cast<double>(done_) * static_cast<double>(total_ - done_);
    eta = fmt::format("{}:{:02}", static_cast<int>(left) / 60, static_cast<int>(left) % 60);
  }
  fmt::print(stderr, "\r\x1b[2K[{}{}] {}/{} ETA {}  {}", std::string(static_cast<std::size_t>(filled), '#'),
             std::string(static_cast<std::size_t>(width - filled), '.'), done_, total_, eta, label_.substr(0, 60));
  std::fflush(stderr);
}

void Progress::finish() {
  if (!on_) return;
  fmt::print(stderr, "\r\x1b[2K");
  std::fflush(stderr);
  on_ = false;
}

}  // namespace ejk::app
