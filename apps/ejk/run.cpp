// ejk run, ejk replay and ejk record: run invocations with the configs the selector chain gives.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <new>

#include <fmt/core.h>

#include "commands.hpp"
#include "workloads.hpp"

namespace ejk::app {

namespace {

struct RunFlags {
  std::string path;
  bool check = false;
  bool passes = false;
};

// One executor per device, created on first use.
class Executors {
 public:
  Executor& operator[](const std::string& device) {
    auto& slot = map_[device];
    if (!slot) slot = std::make_unique<Executor>(open_device(device));
    return *slot;
  }
  // The device's measured ceilings, read once.
  const std::optional<Ceilings>& ceilings(const std::string& device) {
    auto it = ceilings_.find(device);
    if (it == ceilings_.end()) it = ceilings_.emplace(device, stored_ceilings((*this)[device])).first;
    return it->second;
  }

 private:
  std::map<std::string, std::unique_ptr<Executor>> map_;
  std::map<std::string, std::optional<Ceilings>> ceilings_;
};

int run_workset(const Workset& w, const Globals& g, bool check, bool passes) {
  Executors executors;
  Progress progress(w.items.size(), !g.quiet);
  Report report(w.names(), false, !g.quiet, g.json_path, progress,
                w.items.empty() ? std::nullopt : executors.ceilings(w.items.front().device));
  Interruptible interruptible;
  int failed = 0;
  for (const auto& item : w.items) {
    if (Interruptible::requested()) break;
    progress.step(item.name);
    Row row;
    row.name = item.name;
    row.kernel = item.invocation.kernel;
    // An unknown device is the command's error, not one workload's.
    Executor& ex = executors[item.device];
    try {
      const Kernel& k = Registry::global().kernel(item.invocation.kernel);
      // One call through the executor (the path applications take, and what EJK_RECORD
      // records) on the measurement's own inputs, so they are made once.
      Selection s;
      auto select = [&](std::span<const Tensor> args) {
        s = *ex.run(item.invocation, args);
        ex.device().synchronize();
        if (passes) row.passes = ex.device().time_passes([&] { ex.run(item.invocation, args); });
        return s.config;
      };
      Measurement m = measure(item.invocation, select, ex.device(), run_timing(), check);
      row.config = s.config.canonical();
      row.tier = std::string(to_string(s.tier));
      row.reason = s.reason;
      row.flops = k.flops(item.invocation);
      row.bytes = k.bytes(item.invocation);
      row.stats = m.stats;
      row.samples_ns = m.samples_ns;
      if (m.status != Status::ok) {
        row.status = std::string(to_string(m.status));
        row.note = m.message;
        ++failed;
      }
      if (!item.invocation.args.empty())
        apply_roofline(row, executors.ceilings(item.device), item.invocation.args.front().dtype);
    } catch (const InvalidArgument& e) {
      row.status = "invalid";
      row.note = item.where + ": " + e.what();
      ++failed;
    } catch (const NotFound& e) {  // no implementation of the kernel takes it on this device
      row.status = "not found";
      row.note = item.where + ": " + e.what();
      ++failed;
    } catch (const DeviceError& e) {  // a buffer the device cannot hold, a config it cannot compile
      row.status = "device error";
      row.note = item.where + ": " + e.what();
      ++failed;
    } catch (const SelectionError& e) {  // EJK_STRICT: the whole run fails (exit 6), saying where
      throw SelectionError(item.where + ": " + e.what());
    } catch (const std::bad_alloc&) {
      // The checks before the run compare sizes with the memory there is, not with what is free.
      row.status = "out of memory";
      row.note = item.where + ": out of host memory for this workload's arguments";
      ++failed;
    }
    report.add(std::move(row), &ex.device().info());
  }
  progress.finish();
  report.finish();
  if (Interruptible::requested()) return 130;
  return failed ? 1 : 0;
}

}  // namespace

void add_run(CLI::App& app, Globals& g) {
  auto flags = std::make_shared<RunFlags>();
  auto* run = app.add_subcommand("run", "run a recipe's or trace's workloads with the selected configs and report their speed\n"
                                        "  example: ejk run recipes/quickstart.yaml --json run.json");
  run->add_option("workload", flags->path, "recipe (.yaml) or trace (.jsonl)")->required();
  run->add_flag("--check", flags->check, "also check every output against the kernel's reference");
  run->add_flag("--passes", flags->passes,
                "also time each kernel launch of one run (OpenCL: profiling events; Vulkan: timestamps; elsewhere the whole run)");
  run->callback([flags, &g] { g.exit_code = run_workset(load_workset(flags->path, g), g, flags->check, flags->passes); });

  auto* replay = app.add_subcommand("replay", "re-run the invocations of a recorded trace, checking their results\n"
                                              "  example: ejk replay trace.jsonl --json replay.json");
  auto rflags = std::make_shared<RunFlags>();
  replay->add_option("trace", rflags->path, "trace (.jsonl) written with EJK_RECORD or ejk record")->required();
  replay->add_flag("!--no-check", rflags->check, "time only, without checking results")->default_val(true);
  replay->callback([rflags, &g] {
    if (!is_trace(rflags->path)) throw InvalidArgument("replay takes a trace (.jsonl), got " + rflags->path);
    g.exit_code = run_workset(load_workset(rflags->path, g), g, rflags->check, false);
  });

  auto* record = app.add_subcommand(
      "record",
      "record invocations into a trace: those of a recipe, or those a program linked with libejk makes\n"
      "  example: ejk record recipes/quickstart.yaml -o trace.jsonl\n"
      "  example: ejk record -o trace.jsonl -- ./my_app --its-args");
  auto out = std::make_shared<std::string>();
  auto command = std::make_shared<std::vector<std::string>>();
  record->add_option("-o,--output", *out, "trace file to append to")->required();
  record->add_option("recipe", *command, "a recipe, or after --, a command to run with recording on");
  record->callback([out, command, &g] {
    if (command->empty()) throw InvalidArgument("record needs a recipe or -- COMMAND");
    setenv("EJK_RECORD", out->c_str(), 1);
    if (command->size() == 1 && !is_trace((*command)[0]) && std::filesystem::exists((*command)[0]) &&
        ((*command)[0].ends_with(".yaml") || (*command)[0].ends_with(".yml"))) {
      g.exit_code = run_workset(load_workset((*command)[0], g), g, false, false);
      return;
    }
    std::vector<char*> argv;
    for (auto& a : *command) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::fflush(nullptr);
    execvp(argv[0], argv.data());
    const int err = errno;
    throw NotFound("cannot run " + (*command)[0] + ": " + std::strerror(err));
  });
}

}  // namespace ejk::app
