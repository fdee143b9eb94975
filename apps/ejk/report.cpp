#include "report.hpp"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>

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

// "150.97 TFLOP/s", "812.3 GB/s", "3.4 MFLOP/s": `amount` units over `ns`, in the prefix that reads well.
std::string rate(double amount, double ns, const char* unit) {
  if (amount <= 0 || ns <= 0) return "-";
  return human_rate(amount / ns * 1e9, unit);
}

}  // namespace

std::string human_rate(double v, const char* unit) {
  if (!(v > 0)) return "-";
  static const char* prefixes[] = {"", "k", "M", "G", "T", "P", "E"};
  std::size_t p = 0;
  while (v >= 1000 && p + 1 < std::size(prefixes)) v /= 1000, ++p;
  return fmt::format("{:.{}f} {}{}", v, v < 10 ? 2 : 1, prefixes[p], unit);
}

namespace {

// The roofline column, only when the device's ceilings are known: "62% of roofline (compute-bound)".
constexpr std::size_t roofline_width = 31;

std::string roofline_cell(const Row& r, bool shown) {
  if (!shown) return "";
  return fmt::format("{:<{}}  ", r.roofline ? r.roofline->describe() : "-", roofline_width);
}

std::string header(std::size_t w, bool tuning, bool roofline) {
  const std::string roof = roofline ? fmt::format("{:<{}}  ", "roofline", roofline_width) : "";
  if (tuning)
    return fmt::format("{:<{}}  {:>10}  {:>10}  {:>7}  {:>14}  {:>9}  {}{}\n", "workload", w, "heuristic", "tuned", "speedup",
                       "FLOP/s", "evals", roof, "config");
  return fmt::format("{:<{}}  {:>10}  {:>6}  {:>14}  {:>12}  {:<10}  {}{}\n", "workload", w, "median", "±IQR", "FLOP/s", "B/s",
                     "tier", roof, "config");
}

std::string line(const Row& r, std::size_t w, bool tuning, bool roofline) {
  if (r.status != "ok") return fmt::format("{:<{}}  {}: {}\n", r.name, w, r.status, r.note);
  const double t = r.stats.median_ns;
  if (tuning)
    return fmt::format("{:<{}}  {:>10}  {:>10}  {:>7}  {:>14}  {:>9}  {}{}{}\n", r.name, w, human_time(r.heuristic_ns),
                       human_time(t), r.speedup > 0 ? fmt::format("{:.2f}x", r.speedup) : "-", rate(r.flops, t, "FLOP/s"),
                       fmt::format("{}/{}", r.evaluations, r.space), roofline_cell(r, roofline), r.config,
                       r.note.empty() ? "" : "  (" + r.note + ")");
  std::string out = fmt::format("{:<{}}  {:>10}  {:>6}  {:>14}  {:>12}  {:<10}  {}{}\n", r.name, w, human_time(t),
                                t > 0 ? fmt::format("{:.1f}%", 100 * r.stats.iqr_ns / t) : "-",
                                rate(r.flops, t, "FLOP/s"), rate(r.bytes, t, "B/s"), r.tier, roofline_cell(r, roofline),
                                r.config);
  double total = 0;
  for (const auto& p : r.passes) total += p.ns;
  for (const auto& p : r.passes)
    out += fmt::format("  {:<{}}  {:>10}  {:>5.1f}%\n", p.name, w > 2 ? w - 2 : w, human_time(p.ns),
                       total > 0 ? 100 * p.ns / total : 0.0);
  return out;
}

}  // namespace

std::optional<Ceilings> stored_ceilings(Executor& ex) {
  PersistentCache* cache = ex.persistent_cache();
  if (!cache) return std::nullopt;
  return cache->ceilings(ex.device().info().fingerprint());
}

void apply_roofline(Row& row, const std::optional<Ceilings>& c, DType t) {
  if (c && row.status == "ok") row.roofline = roofline(*c, t, row.flops, row.bytes, row.stats.median_ns);
}

nlohmann::json benchmark_json(const DeviceInfo& device, const std::vector<Row>& rows, const Ceilings* ceilings) {
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
  if (ceilings) context["ceilings"] = ceilings->to_json();
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
    if (!r.passes.empty()) {
      nlohmann::json list = nlohmann::json::array();
      for (const auto& p : r.passes) list.push_back({{"name", p.name}, {"ns", p.ns}});
      b["passes"] = std::move(list);
    }
    if (!r.reason.empty()) b["reason"] = r.reason;
    if (r.evaluations > 0) {
      b["evaluations"] = r.evaluations;
      b["failures"] = r.failures;
      b["space"] = r.space;
      b["heuristic_ns"] = r.heuristic_ns;
      b["speedup"] = r.speedup;
      b["tune_seconds"] = r.seconds;
      if (r.near_best_at > 0) b["evaluations_to_near_best"] = r.near_best_at;
      if (!r.warm_start.empty()) b["warm_start"] = r.warm_start;
      if (r.warm_share > 0) b["warm_share"] = r.warm_share;
    }
    if (!r.candidates.empty()) {
      nlohmann::json list = nlohmann::json::array();
      for (const auto& m : r.candidates) {
        nlohmann::json c = {{"config", m.config.to_json()}, {"status", std::string(to_string(m.status))}};
        if (m.status == Status::ok) c["median_ns"] = m.stats.median_ns;
        else c["message"] = m.message;
        list.push_back(std::move(c));
      }
      b["candidates"] = std::move(list);
    }
    if (r.heuristic) b["heuristic"] = r.heuristic->to_json();
    if (r.roofline) b["roofline"] = r.roofline->to_json();
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
  detail_.clear();
  ++done_;
  draw();
}

void Progress::detail(const std::string& text) {
  if (!on_) return;
  detail_ = text;
  draw();
}

void Progress::draw() const {
  // done_ counts the item being worked on: the ETA comes from the ones before it.
  const std::size_t finished = done_ > 0 ? done_ - 1 : 0;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int width = 24;
  const int filled = total_ ? static_cast<int>(width * finished / total_) : width;
  std::string eta = "--";
  if (finished > 0) {
    const double left = elapsed / static_cast<double>(finished) * static_cast<double>(total_ - finished);
    eta = fmt::format("{}:{:02}", static_cast<int>(left) / 60, static_cast<int>(left) % 60);
  }
  std::string what = label_.substr(0, 60);
  if (!detail_.empty()) what += "  " + detail_;
  fmt::print(stderr, "\r\x1b[2K[{}{}] {}/{} ETA {}  {}", std::string(static_cast<std::size_t>(filled), '#'),
             std::string(static_cast<std::size_t>(width - filled), '.'), std::min(done_, total_), total_, eta, what);
  std::fflush(stderr);
}

void Progress::clear() const {
  if (!on_) return;
  fmt::print(stderr, "\r\x1b[2K");
  std::fflush(stderr);
}

void Progress::finish() {
  clear();
  on_ = false;
}

Report::Report(const std::vector<std::string>& names, bool tuning, bool print, std::string json_path, Progress& progress,
               std::optional<Ceilings> ceilings)
    : tuning_(tuning), print_(print), json_path_(std::move(json_path)), progress_(progress), ceilings_(std::move(ceilings)) {
  for (const auto& n : names) width_ = std::max(width_, n.size());
  if (print_) progress_.above([&] { fmt::print("{}", header(width_, tuning_, ceilings_.has_value())); });
}

void Report::add(Row row, const DeviceInfo* device) {
  if (!device_) device_ = device;
  if (print_) progress_.above([&] { fmt::print("{}", line(row, width_, tuning_, ceilings_.has_value())); });
  rows_.push_back(std::move(row));
  dirty_ = true;
  // At most every two seconds: a run of thousands of small workloads must not spend its time
  // rewriting the file. finish() and an interruption write the rest.
  if (std::chrono::steady_clock::now() - written_ >= std::chrono::seconds(2) || Interruptible::requested()) write_json();
}

void Report::finish() {
  if (dirty_ || rows_.empty()) write_json();
}

void Report::write_json() {
  dirty_ = false;
  written_ = std::chrono::steady_clock::now();
  if (json_path_.empty()) return;
  write_json_file(json_path_, benchmark_json(device_ ? *device_ : open_device("cpu")->info(), rows_,
                                             ceilings_ ? &*ceilings_ : nullptr));
}

namespace {

volatile std::sig_atomic_t interrupted = 0;

extern "C" void on_interrupt(int sig) {
  interrupted = 1;
  static const char msg[] = "\nejk: interrupted: finishing the current workload and writing what is done (again to stop now)\n";
  [[maybe_unused]] auto n = write(STDERR_FILENO, msg, sizeof msg - 1);
  std::signal(sig, SIG_DFL);
}

}  // namespace

Interruptible::Interruptible() {
  interrupted = 0;
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
}

Interruptible::~Interruptible() {
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}

bool Interruptible::requested() { return interrupted != 0; }

}  // namespace ejk::app
