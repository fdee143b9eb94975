// Measuring a device's ceilings (ejk/ceilings.hpp): a device copy and the selected matmul.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>

#include <fmt/core.h>

#include "ejk/ceilings.hpp"
#include "ejk/error.hpp"
#include "ejk/executor.hpp"
#include "ejk/policy.hpp"
#include "ejk/registry.hpp"
#include "ejk/tuner.hpp"

namespace ejk {

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

std::string mib(std::size_t bytes) { return fmt::format("{} MiB", bytes / MiB); }

// Large enough that neither buffer lives in a cache: on a CPU (or a driver on its cores) past the
// last-level cache, on a GPU 1 GiB (an H100's L2 is 50 MB); within what the device holds.
std::size_t copy_bytes(const DeviceInfo& d) {
  std::size_t want = 1024 * MiB;
  if (d.cpu) {
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    want = std::max<std::size_t>(64 * MiB, l3 > 0 ? static_cast<std::size_t>(l3) : 0);
  }
  std::size_t room = d.max_buffer ? d.max_buffer : want;
  if (d.global_mem) room = std::min<std::size_t>(room, d.global_mem / 8);
  return std::max<std::size_t>(MiB, std::min(want, room) / MiB * MiB);
}

Figure measure_copy(Device& dev) {
  const std::size_t n = copy_bytes(dev.info());
  auto src = dev.allocate(n), dst = dev.allocate(n);
  // Real values: untouched host pages would read as the zero page, far faster than memory.
  dev.fill_uniform(*src, DType::f32, 0, static_cast<std::int64_t>(n / 4), 1, -1.f, 1.f);
  auto once = [&] { return dev.time_ns([&] { dev.copy(*src, *dst, n); }); };
  once();
  once();  // the first writes of dst fault its pages in
  std::vector<double> ns;
  const auto start = std::chrono::steady_clock::now();
  while (ns.size() < 3 ||
         (ns.size() < 25 && std::chrono::steady_clock::now() - start < std::chrono::milliseconds(400)))
    ns.push_back(once());
  std::sort(ns.begin(), ns.end());
  const double median = ns[ns.size() / 2];
  if (!(median > 0)) throw DeviceError(dev.info().id() + ": a copy of " + mib(n) + " took no measurable time");
  return {2.0 * static_cast<double>(n) / (median * 1e-9), fmt::format("copy of {}, median of {}", mib(n), ns.size())};
}

// The matmul the selector chain picks, at sizes doubling from 512 until one run takes long
// enough (10 ms) to keep the device busy, its rate stops growing, or the operands would not fit.
std::optional<Figure> measure_matmul(Executor& ex, DType t, const std::function<void(const std::string&)>& say) {
  const Kernel& k = Registry::global().kernel("matmul");
  const DeviceInfo& d = ex.device().info();
  TimingOptions timing;
  timing.warmup_seconds = 0.02;
  timing.min_samples = 3;
  timing.max_samples = 15;
  timing.max_seconds = 0.15;
  timing.flush_bytes = 0;  // the peak is what the device reaches from its caches too
  std::optional<Figure> best;
  std::string last_error;
  for (std::int64_t s = 512; s <= 16384; s *= 2) {
    const double operand = static_cast<double>(s) * static_cast<double>(s) * static_cast<double>(dtype_size(t));
    if ((d.max_buffer && operand > static_cast<double>(d.max_buffer)) ||
        (d.global_mem && 3 * operand > static_cast<double>(d.global_mem) / 4))
      break;
    if (say) say(fmt::format("matmul {} {}^3", to_string(t), s));
    const Invocation inv = k.from_sizes({{"m", s}, {"n", s}, {"k", s}}, t, nlohmann::json::object());
    Selection sel;
    auto choose = [&](std::span<const Tensor> args) {
      sel = *ex.run(inv, args);
      ex.device().synchronize();
      return sel.config;
    };
    const Measurement m = measure(inv, choose, ex.device(), timing, false);
    if (m.status != Status::ok) {
      last_error = fmt::format("{}^3: {}: {}", s, to_string(m.status), m.message);
      break;
    }
    const double rate = k.flops(inv) / (m.stats.median_ns * 1e-9);
    const bool grew = !best || rate > best->per_second * 1.05;
    if (!best || rate > best->per_second)
      best = Figure{rate, fmt::format("matmul {}^3 {}, {} config {}", s, to_string(t), to_string(sel.tier),
                                      sel.config.canonical())};
    if (m.stats.median_ns >= 10e6 || !grew) break;
  }
  if (!best && t == DType::f32)
    throw DeviceError(d.id() + ": no f32 matmul ran to measure its peak" + (last_error.empty() ? "" : ": " + last_error));
  if (!best && say) say(fmt::format("no {} matmul ran: {}", to_string(t), last_error));
  return best;
}

}  // namespace

Ceilings measure_ceilings(const std::shared_ptr<Device>& device, const std::function<void(const std::string&)>& progress) {
  Ceilings c;
  if (progress) progress("copy");
  c.copy = measure_copy(*device);
  // The best config known (tuned, shipped, else the heuristic): measuring never tunes on the
  // spot, and EJK_STRICT, meant for benchmark runs, does not refuse the heuristic here.
  ScopedPolicy known({.autotune = AutotunePolicy::heuristics, .strict = Tier::heuristic});
  Executor ex(device);
  std::vector<DType> types{DType::f32};
  if (device->info().fp16) types.push_back(DType::f16);
  if (device->info().bf16) types.push_back(DType::bf16);
  for (DType t : types) {
    std::optional<Figure> f;
    try {
      f = measure_matmul(ex, t, progress);
    } catch (const Error& e) {
      // A 16-bit dtype the device lists but no matmul here takes: absent, and said so.
      if (t == DType::f32) throw;
      if (progress) progress(fmt::format("no {} matmul: {}", to_string(t), e.what()));
    }
    if (f) c.matmul[t] = *f;
  }
  c.measured_unix = static_cast<std::int64_t>(std::time(nullptr));
  return c;
}

}  // namespace ejk
