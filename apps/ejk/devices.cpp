#include <fstream>

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
    if (!g.json_path.empty()) {
      std::ofstream out(g.json_path);
      if (!out) throw IoError("cannot write " + g.json_path);
      out << all.dump(2) << "\n";
    }
  });
}

void add_kernels(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand("kernels", "list kernels and their implementations\n  example: ejk kernels --space matmul");
  auto* space = new std::string;
  cmd->add_option("--space", *space, "print the parameter space of KERNEL on the chosen device");
  cmd->callback([&g, space] {
    Registry& r = Registry::global();
    if (space->empty()) {
      for (const auto& k : r.kernels()) {
        std::string backends;
        for (const auto* impl : r.implementations(k))
          backends += fmt::format("{}{}", backends.empty() ? "" : ", ", to_string(impl->backend()));
        fmt::print("{:<24} {}\n", k, backends);
      }
      return;
    }
    const Kernel& k = r.kernel(*space);
    for (const auto* impl : r.implementations(k.name())) {
      fmt::print("{} on {} (priority {}, version {})\n", k.name(), to_string(impl->backend()), impl->priority(), r.version(*impl));
    }
    (void)g;
  });
}

}  // namespace ejk::app
