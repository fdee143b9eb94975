#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "ejk/ejk.hpp"
#include "report.hpp"

namespace ejk::app {

namespace {
std::string mib(std::uint64_t bytes) {
  if (bytes >= (1ull << 30)) return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (1ull << 30));
  if (bytes >= (1ull << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1ull << 20));
  return fmt::format("{} KiB", bytes >> 10);
}

std::string utc(std::int64_t unix) {
  std::time_t t = static_cast<std::time_t>(unix);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

void print_ceilings(const Ceilings& c, bool verbose) {
  std::string line;
  if (c.copy) line = "copy " + human_rate(c.copy->per_second, "B/s");
  for (const auto& [t, f] : c.matmul)
    line += fmt::format("{}matmul {} {}", line.empty() ? "" : ", ", to_string(t), human_rate(f.per_second, "FLOP/s"));
  fmt::print("  ceilings: {} (measured {})\n", line, utc(c.measured_unix));
  if (!verbose) return;
  if (c.copy) fmt::print("    copy: {}\n", c.copy->how);
  for (const auto& [t, f] : c.matmul) fmt::print("    matmul {}: {}\n", to_string(t), f.how);
}

// Measures the ceilings of every device `only` names (all when empty) and stores them.
void measure(const std::vector<DeviceInfo>& devices, const std::string& only, const Globals& g) {
  PersistentCache cache(default_cache_path());
  if (!cache.writable())
    throw IoError("persistent cache " + cache.path().string() +
                  " can only be read: the ceilings would be lost (point --cache-dir or EJK_CACHE_DIR elsewhere)");
  const std::string wanted = only.empty() ? "" : open_device(only)->info().id();
  for (const auto& d : devices) {
    if (!wanted.empty() && d.id() != wanted) continue;
    auto dev = open_device(d.id());
    Progress progress(1, !g.quiet);
    progress.step(d.id() + " ceilings");
    const Ceilings c = measure_ceilings(dev, [&](const std::string& what) { progress.detail(what); });
    progress.finish();
    cache.put_ceilings(DeviceRecord::of(dev->info()), c);
  }
}

}  // namespace

void add_devices(CLI::App& app, Globals& g) {
  auto measure_flag = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand(
      "devices",
      "list every device with its capabilities and measured ceilings\n"
      "  example: ejk devices --json devices.json\n"
      "  example: ejk --device cpu devices --measure   (copy bandwidth and matmul peak, for rooflines)");
  cmd->add_flag("--measure", *measure_flag,
                "time each device's copy bandwidth and fastest matmul (only --device's when given) and store them in "
                "the persistent cache: run, tune and report then show results as a share of the roofline");
  cmd->callback([&g, measure_flag] {
    const std::vector<DeviceInfo> devices = list_devices();
    if (*measure_flag) measure(devices, g.device, g);
    // Listing reads the ceilings only from a cache that exists: it never creates one.
    std::optional<PersistentCache> cache;
    if (std::filesystem::exists(default_cache_path())) cache.emplace(default_cache_path());
    nlohmann::json all = nlohmann::json::array();
    for (const auto& d : devices) {
      all.push_back(d.to_json());
      const std::optional<Ceilings> ceilings = cache ? cache->ceilings(d.fingerprint()) : std::nullopt;
      if (ceilings) all.back()["ceilings"] = ceilings->to_json();
      if (g.quiet) {
        fmt::print("{}\n", d.id());
        continue;
      }
      fmt::print("{:<10} {} ({})\n", d.id(), d.name, d.vendor);
      fmt::print("  driver {}, {}, arch {}{}\n", d.driver, d.api_version, d.architecture, d.discrete ? ", discrete GPU" : "");
      const std::string fixed = d.static_local() != d.local_mem ? fmt::format(" ({} in fixed-size arrays)", mib(d.static_local())) : "";
      fmt::print("  {} compute units, local memory {}{}, max workgroup {} ({}x{}x{}), global {}, max buffer {}\n",
                 d.compute_units, mib(d.local_mem), fixed, d.max_workgroup_size, d.max_workgroup_dims[0],
                 d.max_workgroup_dims[1], d.max_workgroup_dims[2], mib(d.global_mem), mib(d.max_buffer));
      std::string coop;
      for (const auto& c : d.coopmat)
        coop += fmt::format("{}{}x{}x{} {}->{}", coop.empty() ? "" : ", ", c.m, c.n, c.k, to_string(c.a), to_string(c.c));
      fmt::print("  subgroup {}, fp16 {}, bf16 {}, cooperative matrices: {}\n", d.subgroup_size, d.fp16 ? "yes" : "no",
                 d.bf16 ? "yes" : "no", coop.empty() ? "none" : coop);
      if (ceilings) print_ceilings(*ceilings, g.verbose);
      if (g.verbose) {
        fmt::print("  fingerprint {}\n", d.fingerprint());
        // Opening the device is what it takes to ask (NCCL is looked for once, then kept).
        const PeerTransport pt = peer_transport(*open_device(d.id()));
        fmt::print("  transport to other processes: {}\n", pt.absent.empty() ? pt.name : "none (" + pt.absent + ")");
      }
    }
    if (!g.json_path.empty()) write_json_file(g.json_path, all);
  });
}

void add_kernels(CLI::App& app, Globals& g) {
  struct Flags {
    std::string space;
    std::vector<std::string> sizes;
    std::string dtype = "f32";
  };
  auto f = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand("kernels", "list kernels and their implementations, or one kernel's parameter space\n"
                                            "  example: ejk kernels --space matmul --size m=4096 --size n=4096 --size k=4096 --dtype f16");
  cmd->add_option("--space", f->space, "print KERNEL's parameter space for one workload on the chosen device");
  cmd->add_option("--size", f->sizes, "a size of that workload, NAME=VALUE (missing sizes come from the kernel's example workload)");
  cmd->add_option("--dtype", f->dtype, "dtype of that workload")->default_val("f32");
  cmd->callback([f, &g] {
    Registry& r = Registry::global();
    if (f->space.empty()) {
      for (const auto& k : r.kernels()) {
        std::string backends;
        for (const auto* impl : r.implementations(k))
          backends += fmt::format("{}{} ({})", backends.empty() ? "" : ", ", to_string(impl->backend()), r.version(*impl));
        std::string sizes;
        for (const auto& s : r.kernel(k).size_names()) sizes += (sizes.empty() ? "" : ",") + s;
        fmt::print("{:<24} {}{}\n", k, backends, sizes.empty() ? "" : "   sizes: " + sizes);
      }
      return;
    }
    const Kernel& k = r.kernel(f->space);
    if (k.size_names().empty()) throw InvalidArgument("kernel " + f->space + " cannot be described by sizes");
    // The user's sizes override the kernel's example workload one by one.
    std::map<std::string, std::int64_t> sizes = k.example_sizes();
    for (const auto& s : f->sizes) {
      auto eq = s.find('=');
      if (eq == std::string::npos) throw InvalidArgument("--size takes NAME=VALUE, got '" + s + "'");
      sizes[s.substr(0, eq)] = integer_option("--size " + s.substr(0, eq), s.substr(eq + 1), 0, max_dim);
    }
    Invocation inv = k.from_sizes(sizes, parse_dtype(f->dtype), nlohmann::json::object());
    auto dev = open_device(g.device.empty() ? default_device_name() : g.device);
    const Implementation& impl = r.implementation(inv, dev->info());
    ParamSpace space = impl.space(inv, dev->info());
    fmt::print("{} on {} ({}), version {}\nworkload {}\n", k.name(), dev->info().id(), dev->info().name,
               r.version(impl), inv.signature());
    fmt::print("{}", space.describe());
    auto configs = space.enumerate();
    fmt::print("{} of {} combinations satisfy the constraints; heuristic: {}\n", configs.size(), space.cardinality(),
               impl.heuristic(inv, dev->info()).canonical());
  });
}

}  // namespace ejk::app
