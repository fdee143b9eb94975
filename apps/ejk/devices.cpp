#include <fstream>
#include <map>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "ejk/ejk.hpp"

namespace ejk::app {

namespace {
std::string mib(std::uint64_t bytes) {
  if (bytes >= (1ull << 30)) return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (1ull << 30));
  if (bytes >= (1ull << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1ull << 20));
  return fmt::format("{} KiB", bytes >> 10);
}
}  // namespace

void add_devices(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand("devices", "list every device with its capabilities\n  example: ejk devices --json devices.json");
  cmd->callback([&g] {
    nlohmann::json all = nlohmann::json::array();
    for (const auto& d : list_devices()) {
      all.push_back(d.to_json());
      if (g.quiet) {
        fmt::print("{}\n", d.id());
        continue;
      }
      fmt::print("{:<10} {} ({})\n", d.id(), d.name, d.vendor);
      fmt::print("  driver {}, {}, arch {}{}\n", d.driver, d.api_version, d.architecture, d.discrete ? ", discrete GPU" : "");
      fmt::print("  {} compute units, local memory {}, max workgroup {} ({}x{}x{}), global {}, max buffer {}\n",
                 d.compute_units, mib(d.local_mem), d.max_workgroup_size, d.max_workgroup_dims[0],
                 d.max_workgroup_dims[1], d.max_workgroup_dims[2], mib(d.global_mem), mib(d.max_buffer));
      std::string coop;
      for (const auto& c : d.coopmat)
        coop += fmt::format("{}{}x{}x{} {}->{}", coop.empty() ? "" : ", ", c.m, c.n, c.k, to_string(c.a), to_string(c.c));
      fmt::print("  subgroup {}, fp16 {}, bf16 {}, cooperative matrices: {}\n", d.subgroup_size, d.fp16 ? "yes" : "no",
                 d.bf16 ? "yes" : "no", coop.empty() ? "none" : coop);
      if (g.verbose) fmt::print("  fingerprint {}\n", d.fingerprint());
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
