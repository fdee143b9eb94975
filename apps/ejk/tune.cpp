// ejk tune: tune every invocation of a recipe or trace and store the winners in the persistent cache.
#include <map>
#include <set>

#include <fmt/core.h>

#include "commands.hpp"
#include "workloads.hpp"

namespace ejk::app {

namespace {

struct TuneFlags {
  std::string path;
  std::string strategy;
  int evals = -1;
  double seconds = -1;
  std::int64_t seed = -1;
  bool isolate = false;
  bool force = false;
};

Row row_of(const Item& item, const TuneResult& r) {
  const Kernel& k = Registry::global().kernel(item.invocation.kernel);
  Row row;
  row.name = item.name;
  row.kernel = item.invocation.kernel;
  row.flops = k.flops(item.invocation);
  row.bytes = k.bytes(item.invocation);
  row.config = r.entry.config.canonical();
  row.tier = r.tuned ? "tuned" : "heuristic";
  row.stats = r.entry.stats;
  row.heuristic_ns = r.heuristic_measurement && r.heuristic_measurement->status == Status::ok
                         ? r.heuristic_measurement->stats.median_ns
                         : 0;
  row.speedup = r.speedup;
  row.evaluations = static_cast<int>(r.measurements.size());
  for (const auto& m : r.measurements)
    if (m.status != Status::ok) ++row.failures;
  row.space = r.space_size;
  row.seconds = r.seconds;
  if (!r.tuned) row.note = "no candidate passed; falls back to the heuristic";
  else if (row.failures) row.note = fmt::format("{} candidates failed", row.failures);
  return row;
}

}  // namespace

void add_tune(CLI::App& app, Globals& g) {
  auto f = std::make_shared<TuneFlags>();
  auto* cmd = app.add_subcommand(
      "tune",
      "tune every invocation of a recipe or trace on its device and store the winners in the persistent cache\n"
      "  example: ejk tune recipes/quickstart.yaml\n"
      "  example: ejk tune trace.jsonl --strategy model --evals 40 --isolate");
  cmd->add_option("workload", f->path, "recipe (.yaml) or trace (.jsonl)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--strategy", f->strategy, "exhaustive | random | anneal | model (default: the recipe's, else anneal)");
  cmd->add_option("--evals", f->evals, "candidates per invocation (default: the recipe's)");
  cmd->add_option("--seconds", f->seconds, "seconds per invocation (default: the recipe's)");
  cmd->add_option("--seed", f->seed, "search seed (default: the recipe's)");
  cmd->add_flag("--isolate", f->isolate, "run candidates in a worker process that is killed on a crash or hang");
  cmd->add_flag("--force", f->force, "tune again invocations the persistent cache already has");
  cmd->callback([f, &g] {
    Workset w = load_workset(f->path, g);
    TuneSettings s = w.tune.value_or(TuneSettings{});
    TuneOptions opts;
    opts.strategy = parse_strategy(f->strategy.empty() ? s.strategy : f->strategy);
    opts.budget.evaluations = f->evals >= 0 ? f->evals : s.evals;
    opts.budget.seconds = f->seconds >= 0 ? f->seconds : s.seconds;
    opts.seed = static_cast<std::uint64_t>(f->seed >= 0 ? f->seed : static_cast<std::int64_t>(s.seed));
    opts.isolate = f->isolate;
    opts.constraints = s.constraints;

    std::map<std::string, std::unique_ptr<Executor>> executors;
    std::set<std::string> seen;
    std::vector<Row> rows;
    const DeviceInfo* first_device = nullptr;
    Progress progress(w.items.size(), !g.quiet);
    int unusable = 0;
    for (const auto& item : w.items) {
      progress.step(item.name);
      auto& ex = executors[item.device];
      if (!ex) ex = std::make_unique<Executor>(open_device(item.device));
      if (!first_device) first_device = &ex->device().info();
      std::string key = ex->key(item.invocation);
      if (!seen.insert(key).second) continue;
      PersistentCache* cache = ex->persistent_cache();
      if (!f->force && cache) {
        if (auto hit = cache->get(key)) {
          Row row;
          row.name = item.name;
          row.kernel = item.invocation.kernel;
          row.config = hit->config.canonical();
          row.tier = "persistent";
          row.stats = hit->stats;
          const Kernel& k = Registry::global().kernel(item.invocation.kernel);
          row.flops = k.flops(item.invocation);
          row.bytes = k.bytes(item.invocation);
          row.note = "already tuned (--force to tune again)";
          rows.push_back(std::move(row));
          continue;
        }
      }
      TuneResult r = ejk::tune(item.invocation, ex->device(), opts);
      if (r.tuned && cache) cache->put(r.entry, r.measurements, DeviceRecord::of(ex->device().info()));
      if (!r.tuned) ++unusable;
      if (g.verbose) fmt::print(stderr, "{}\n", r.report);
      rows.push_back(row_of(item, r));
    }
    progress.finish();
    if (!g.quiet) print_table(rows, true);
    if (!g.json_path.empty())
      write_json_file(g.json_path, benchmark_json(first_device ? *first_device : open_device("cpu")->info(), rows));
    g.exit_code = unusable ? 1 : 0;
  });
}

}  // namespace ejk::app
