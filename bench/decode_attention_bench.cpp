// Decode attention on every device: the native CPU backend and every opencl:N and vulkan:N device
// present; page_attention, ragged_decode_attention (contiguous cache, every range the whole row)
// and ragged_page_attention (one query token per sequence: a decode batch). Default shape:
// ../PERF.md's decode case, batch 32, 32 heads over 8 kv heads, context 4096, head_dim 128, f16,
// pages of 16 tokens (the CPU rows default to batch 8).
// Each GPU-backend case runs with the heuristic config and with the config a short model tune
// picks. Timed on the device's clock. Bandwidth-bound: GB/s counts the bytes that must move
// once: every cached key and value a context reaches, the query, the output and the index
// arrays. The peer, BM_decode_copy_peer/<device>, copies as many bytes on the same device and
// clock (4.15 TB/s read + written on the H200, ../DEVICE.md; ../PERF.md asks for 80% of it).
// On Vulkan devices BM_decode_copy_peer/<device>/transfer and /shader time each of the copy's
// paths (vulkan::CopyPath: vkCmdCopyBuffer, kernels/common/copy.comp) beside the default one.
//
// $EJK_BENCH_DECODE_SHAPE="B,H,KVH,CTX,D" overrides the shape (CPU-hosted drivers need a smaller
// one: lavapipe's largest buffer is 128 MiB), $EJK_BENCH_DECODE_DTYPE picks f32 | f16 | bf16,
// $EJK_BENCH_TUNE_EVALS the tune's budget (default 24; 0 skips the tuned rows).
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "ejk/ejk.hpp"
#ifdef EJK_HAVE_VULKAN
#include "backends/vulkan/vulkan_device.hpp"
#endif

namespace {

using namespace ejk;

struct DecodeShape {
  std::int64_t b = 32, h = 32, kvh = 8, ctx = 4096, d = 128, block = 16;
};

DecodeShape shape(bool cpu) {
  DecodeShape s;
  if (cpu) s.b = 8;
  if (const char* env = std::getenv("EJK_BENCH_DECODE_SHAPE")) {
    char sep = 0;
    std::istringstream in(env);
    in >> s.b >> sep >> s.h >> sep >> s.kvh >> sep >> s.ctx >> sep >> s.d;
    if (!in || s.b <= 0 || s.h <= 0 || s.kvh <= 0 || s.ctx <= 0 || s.d <= 0)
      throw InvalidArgument(std::string("EJK_BENCH_DECODE_SHAPE='") + env + "' (expected B,H,KVH,CTX,D)");
  }
  return s;
}

DType dtype() {
  const char* env = std::getenv("EJK_BENCH_DECODE_DTYPE");
  return env ? parse_dtype(env) : DType::f16;
}

int tune_evals() {
  const char* env = std::getenv("EJK_BENCH_TUNE_EVALS");
  return env ? std::atoi(env) : 24;
}

const char* const kernels_benched[] = {"page_attention", "ragged_decode_attention", "ragged_page_attention"};

// Inputs of one (device, kernel), made once: the kernel's own valid random inputs (every context
// full, block tables shuffled across the cache).
struct Tensors {
  Context ctx;
  DecodeShape s;
  Invocation inv;
  std::vector<Tensor> args;
  double bytes = 0;  // moved once: keys and values of every context, query, out, index arrays
  Tensors(const std::string& device, const std::string& kernel) : ctx(device) {
    s = shape(ctx.device().info().backend == Backend::cpu);
    const Kernel& k = Registry::global().kernel(kernel);
    std::map<std::string, std::int64_t> sizes{{"heads", s.h}, {"kv_heads", s.kvh}, {"head_dim", s.d}};
    if (kernel == "page_attention") {
      sizes.insert({{"batch", s.b}, {"context", s.ctx}, {"block_size", s.block}});
    } else if (kernel == "ragged_decode_attention") {
      sizes.insert({{"batch", s.b}, {"seq", s.ctx}});
    } else {
      sizes.insert({{"num_seqs", s.b}, {"q_len", 1}, {"context", s.ctx}, {"block_size", s.block}});
    }
    inv = k.from_sizes(sizes, dtype(), nlohmann::json::object());
    bytes = k.bytes(inv);
    const HostArrays a = k.inputs(inv, 1);
    for (std::size_t i = 0; i < inv.args.size(); ++i) {
      args.push_back(ctx.empty(inv.args[i].shape, inv.args[i].dtype));
      if (!a[i].empty()) args.back().write(a[i]);
    }
  }
};

Tensors& tensors(const std::string& device, const std::string& kernel) {
  static std::map<std::string, std::unique_ptr<Tensors>> all;
  auto& t = all[device + "/" + kernel];
  if (!t) t = std::make_unique<Tensors>(device, kernel);
  return *t;
}

void run_case(benchmark::State& state, const std::string& device, const std::string& kernel, bool tuned) {
  Tensors& t = tensors(device, kernel);
  const DeviceInfo& info = t.ctx.device().info();
  const Implementation& impl = Registry::global().implementation(t.inv, info);
  Config config = impl.heuristic(t.inv, info);
  std::string label = "heuristic " + config.canonical();
  if (tuned) {
    TuneOptions o;
    o.strategy = Strategy::model;
    o.budget.evaluations = tune_evals();
    o.seed = 1;
    o.timing.max_seconds = 0.5;
    const TuneResult r = tune(t.inv, t.ctx.device(), o);
    config = r.entry.config;
    label = (r.tuned ? "tuned " : "heuristic (no candidate passed) ") + config.canonical();
  }
  auto once = [&] { impl.run(t.inv, config, t.args, t.ctx.device()); };
  once();  // compile and warm up outside the timed loop
  t.ctx.device().synchronize();
  for (auto _ : state) state.SetIterationTime(t.ctx.device().time_ns(once) * 1e-9);
  state.counters["GB/s"] = benchmark::Counter(t.bytes * static_cast<double>(state.iterations()) / 1e9,
                                              benchmark::Counter::kIsRate);
  state.SetLabel(info.name + ", " + std::string(to_string(dtype())) + ", B" + std::to_string(t.s.b) + " H" +
                 std::to_string(t.s.h) + "/" + std::to_string(t.s.kvh) + " ctx " + std::to_string(t.s.ctx) + " D" +
                 std::to_string(t.s.d) + ", " + label);
}

// The peer: a device-to-device copy of as many bytes as the kernel reads, on the same device and
// clock; GB/s counts bytes read plus bytes written, as ../DEVICE.md's copy anchor does.
void copy_peer(benchmark::State& state, const std::string& device, const std::string& path) {
  Tensors& t = tensors(device, kernels_benched[0]);
  Device& dev = t.ctx.device();
  const std::size_t bytes = static_cast<std::size_t>(t.bytes);
  auto src = dev.allocate(bytes), dst = dev.allocate(bytes);
  std::function<void()> copy_once = [&] { dev.copy(*src, *dst, bytes); };
#ifdef EJK_HAVE_VULKAN
  if (!path.empty()) {
    auto& vk = vulkan::vulkan_device(dev);
    const vulkan::CopyPath p = path == "shader" ? vulkan::CopyPath::shader : vulkan::CopyPath::transfer;
    copy_once = [&vk, p, &src, &dst, bytes] { vk.copy_by(p, *src, 0, *dst, 0, bytes); };
  }
#endif
  copy_once();
  dev.synchronize();
  for (auto _ : state) state.SetIterationTime(dev.time_ns(copy_once) * 1e-9);
  state.counters["GB/s"] = benchmark::Counter(2.0 * static_cast<double>(bytes) * static_cast<double>(state.iterations()) / 1e9,
                                              benchmark::Counter::kIsRate);
  state.SetLabel(dev.info().name + ", " + std::to_string(bytes >> 20) + " MiB copied" + (path.empty() ? "" : " by " + path));
}

// Registered before main: the CPU, then one row per GPU-backend device and config source.
const int registered = [] {
  std::vector<std::string> devices{"cpu"};
  try {
    for (const auto& d : list_devices())
      if (d.backend != Backend::cpu) devices.push_back(d.id());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "decode_attention_bench: no devices: %s\n", e.what());
  }
  for (const auto& dev : devices) {
    std::vector<std::string> paths{""};
#ifdef EJK_HAVE_VULKAN
    if (dev.starts_with("vulkan:")) paths.insert(paths.end(), {"transfer", "shader"});
#endif
    for (const auto& path : paths)
      benchmark::RegisterBenchmark(("BM_decode_copy_peer/" + dev + (path.empty() ? "" : "/" + path)).c_str(),
                                   [dev, path](benchmark::State& s) { copy_peer(s, dev, path); })
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->MinTime(0.2);
  }
  for (const std::string kernel : kernels_benched)
    for (const auto& dev : devices)
      for (bool tuned : {false, true}) {
        if (tuned && (tune_evals() <= 0 || dev == "cpu")) continue;
        const std::string name = "BM_" + kernel + "/" + dev + (tuned ? "/tuned" : "/heuristic");
        benchmark::RegisterBenchmark(name.c_str(), [dev, kernel, tuned](benchmark::State& s) { run_case(s, dev, kernel, tuned); })
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond)
            ->MinTime(0.2);
      }
  return 0;
}();

}  // namespace
