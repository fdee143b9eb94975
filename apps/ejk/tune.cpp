// ejk tune: tune every invocation of a recipe or trace and store the winners in the persistent cache.
#include <algorithm>
#include <cstdlib>
#include <limits>
#include <map>
#include <new>
#include <optional>
#include <set>

#include <fmt/core.h>

#include "commands.hpp"
#include "ejk/distributed.hpp"
#include "workloads.hpp"

namespace ejk::app {

namespace {

struct TuneFlags {
  std::string path;
  std::string strategy;
  // As given (empty: not given), read exactly when the command runs.
  std::string evals, seconds, race, seed;
  bool isolate = false;
  bool force = false;
  bool cold = false;
  std::string bundle;
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
  row.near_best_at = static_cast<int>(r.evaluations_to_near_best);
  if (r.warm_start) row.warm_start = r.warm_start->config.canonical() + " (" + r.warm_start->source + ")";
  row.warm_share = r.warm_share;
  for (const auto& m : r.measurements)
    if (m.status != Status::ok) ++row.failures;
  row.space = r.space_size;
  row.seconds = r.seconds;
  row.candidates = r.measurements;
  row.heuristic = r.heuristic;
  // A heuristic outside the space was measured on its own, as the baseline: it is a candidate too.
  if (r.heuristic_measurement &&
      std::none_of(r.measurements.begin(), r.measurements.end(), [&](const Measurement& m) { return m.config == r.heuristic; }))
    row.candidates.push_back(*r.heuristic_measurement);
  if (!r.tuned) row.note = item.where + ": no candidate passed; falls back to the heuristic";
  else if (row.failures) row.note = fmt::format("{} candidates failed", row.failures);
  return row;
}

Row failed_row(const Item& item, const std::string& why) {
  Row row;
  row.name = item.name;
  row.kernel = item.invocation.kernel;
  row.tier = "failed";
  row.status = "failed";
  row.note = item.where + ": " + why;
  return row;
}

// The tuner takes constraints that read none of a space's parameters to be meant for another
// kernel and leaves them out: one that reads no parameter of any workload (a typo) would vanish
// without a word. One that reads a name a space lacks, or cannot be evaluated over it (division
// by zero, overflow), would fail mid-tune. All are refused at their place in the recipe before
// anything is tuned.
void check_constraints(const Workset& w, const TuneSettings& s) {
  if (s.constraints.empty()) return;
  std::vector<bool> applies(s.constraints.size(), false);
  std::map<std::string, std::string> seen;  // "kernel on device" -> its parameters, for the message
  std::set<std::string> done;               // device and signature of the spaces checked
  for (const Item& item : w.items) {
    if (!done.insert(item.device + "\n" + item.invocation.kernel + "\n" + item.invocation.signature()).second) continue;
    auto dev = open_device(item.device);
    ParamSpace space;
    try {
      space = Registry::global().implementation(item.invocation, dev->info()).space(item.invocation, dev->info());
    } catch (const Error&) {
      continue;  // no space here: tuning this workload fails with its own reason
    }
    std::set<std::string> params, known;
    for (const auto& p : space.params()) params.insert(p.name), known.insert(p.name);
    for (const auto& [name, _] : space.bound()) known.insert(name);
    std::string list;
    for (const auto& p : params) list += (list.empty() ? "" : ", ") + p;
    const std::string what = item.invocation.kernel + " on " + dev->info().id();
    seen[what] = list;
    for (std::size_t c = 0; c < s.constraints.size(); ++c) {
      const auto names = Expr::parse(s.constraints[c]).names();
      if (std::none_of(names.begin(), names.end(), [&](const std::string& n) { return params.count(n) > 0; })) continue;
      applies[c] = true;
      for (const auto& n : names)
        if (!known.count(n))
          throw InvalidArgument(s.constraint_where[c] + ": constraint '" + s.constraints[c] + "' reads '" + n + "', which " +
                                what + " has neither as a parameter (" + list + ") nor as a variable");
      ParamSpace with = space;
      with.constraint(s.constraints[c]);
      try {
        (void)with.enumerate();
      } catch (const InvalidArgument& e) {
        throw InvalidArgument(s.constraint_where[c] + ": " + e.what() + " (over the space of " + what + ", " + item.where + ")");
      }
    }
  }
  for (std::size_t c = 0; c < s.constraints.size(); ++c) {
    if (applies[c]) continue;
    std::string spaces;
    for (const auto& [what, list] : seen) spaces += (spaces.empty() ? "" : "; ") + what + ": " + list;
    throw InvalidArgument(s.constraint_where[c] + ": constraint '" + s.constraints[c] +
                          "' reads no parameter of any workload's space (" + spaces + ")");
  }
}

Row cached_row(const Item& item, const CacheEntry& hit) {
  Row row;
  row.name = item.name;
  row.kernel = item.invocation.kernel;
  row.config = hit.config.canonical();
  row.tier = "persistent";
  row.stats = hit.stats;
  const Kernel& k = Registry::global().kernel(item.invocation.kernel);
  row.flops = k.flops(item.invocation);
  row.bytes = k.bytes(item.invocation);
  row.note = "already tuned (--force to tune again)";
  return row;
}

// What a tune run works on: the distinct invocations of the workset (by key on the item's
// device), with the rows of those the persistent cache already answers.
struct Plan {
  std::map<std::string, std::unique_ptr<Executor>> executors;
  std::vector<std::optional<Row>> rows;  // per item; empty for duplicates and items to tune
  std::vector<std::size_t> to_tune;      // item indices
  std::vector<std::string> keys;         // every distinct key of the run
  const DeviceInfo* first_device = nullptr;
  std::string first_name;
  std::map<std::string, std::optional<Ceilings>> ceilings;  // per device name, measured ones only
  std::optional<Ceilings> first_ceilings() const {
    auto it = ceilings.find(first_name);
    return it == ceilings.end() ? std::nullopt : it->second;
  }
  // The roofline of an item's row on its device, when that device's ceilings are known.
  void roofline(Row& row, const Item& item) const {
    auto it = ceilings.find(item.device);
    if (it != ceilings.end() && !item.invocation.args.empty())
      apply_roofline(row, it->second, item.invocation.args.front().dtype);
  }
};

// Tuning is for the persistent cache: refused before any time is spent when nothing could be
// stored. Throws IoError naming the cache and why.
void require_writable_cache() {
  PersistentCache cache(default_cache_path());
  if (!cache.writable())
    throw IoError("persistent cache " + cache.path().string() +
                  " can only be read: tune would store nothing (point --cache-dir or EJK_CACHE_DIR elsewhere)");
}

Plan plan(const Workset& w, bool force) {
  require_writable_cache();
  Plan p;
  std::set<std::string> seen;
  p.rows.resize(w.items.size());
  for (std::size_t i = 0; i < w.items.size(); ++i) {
    const Item& item = w.items[i];
    auto& ex = p.executors[item.device];
    if (!ex) {
      ex = std::make_unique<Executor>(open_device(item.device));
      p.ceilings[item.device] = stored_ceilings(*ex);
    }
    if (!p.first_device) {
      p.first_device = &ex->device().info();
      p.first_name = item.device;
    }
    std::string key;
    at_place(item.where, [&] { key = ex->key(item.invocation); });
    if (!seen.insert(key).second) continue;
    p.keys.push_back(key);
    PersistentCache* cache = ex->persistent_cache();
    if (!force && cache)
      if (auto hit = cache->get(key)) {
        p.rows[i] = cached_row(item, *hit);
        p.roofline(*p.rows[i], item);
        continue;
      }
    p.to_tune.push_back(i);
  }
  return p;
}

// The cache's entries for `keys` as one bundle (every device they were measured on).
void write_run_bundle(const std::string& path, const std::vector<std::string>& keys, bool quiet) {
  PersistentCache cache(default_cache_path());
  std::vector<CacheEntry> entries;
  std::map<std::string, DeviceRecord> devices;
  for (const auto& key : keys) {
    auto e = cache.get(key);
    if (!e) continue;
    if (!devices.count(e->fingerprint)) {
      auto rec = cache.device(e->fingerprint);
      devices[e->fingerprint] = rec ? *rec : DeviceRecord{e->fingerprint, "", "", "", "", ""};
    }
    entries.push_back(std::move(*e));
  }
  if (entries.empty()) {
    // The run's rows already say why nothing was tuned; an empty bundle would only mislead.
    fmt::print(stderr, "ejk: nothing tuned, no bundle written to {}\n", path);
    return;
  }
  std::vector<DeviceRecord> recs;
  for (auto& [_, r] : devices) recs.push_back(r);
  Bundle b = Bundle::make(std::move(recs), std::move(entries));
  write_bundle(path, b);
  if (!quiet)
    fmt::print("wrote {} entries for {} device(s) to {} (sha256 {})\n", b.entries.size(), b.devices.size(), path,
               b.checksum().substr(0, 16));
}

void finish_run(Plan& p, Report& report, const TuneFlags& f, Globals& g, int unusable) {
  report.finish();
  if (!f.bundle.empty()) write_run_bundle(f.bundle, p.keys, g.quiet);
  g.exit_code = Interruptible::requested() ? 130 : unusable ? 1 : 0;
}

void tune_here(const Workset& w, const TuneOptions& options, const TuneFlags& f, Globals& g) {
  Plan p = plan(w, f.force);
  Progress progress(p.to_tune.size(), !g.quiet);
  Report report(w.names(), true, !g.quiet, g.json_path, progress, p.first_ceilings());
  Interruptible interruptible;
  TuneOptions opts = options;
  opts.progress = [&progress](const Measurement&, std::size_t evaluated, std::size_t space) {
    progress.detail(fmt::format("candidate {}/{}", evaluated, space));
  };
  int unusable = 0;
  std::size_t next = 0;
  for (std::size_t i = 0; i < w.items.size(); ++i) {
    if (Interruptible::requested()) break;
    if (p.rows[i]) {
      report.add(std::move(*p.rows[i]), p.first_device);
      continue;
    }
    if (next >= p.to_tune.size() || p.to_tune[next] != i) continue;  // a duplicate
    ++next;
    const Item& item = w.items[i];
    progress.step(item.name);
    Executor& ex = *p.executors[item.device];
    TuneResult r;
    try {
      TuneOptions these = opts;
      if (!f.cold) these.warm_start = ex.warm_start(item.invocation);
      r = ejk::tune(item.invocation, ex.device(), these);
    } catch (const IoError&) {
      throw;  // the cache or the worker's files, not this workload
    } catch (const Error& e) {
      // This workload cannot be tuned here (no config fits, the device cannot hold it): its row
      // says why and where, and the others go on.
      report.add(failed_row(item, e.what()), &ex.device().info());
      ++unusable;
      continue;
    } catch (const std::bad_alloc&) {
      // The checks before the run compare sizes with the memory there is, not with what is free.
      report.add(failed_row(item, "out of host memory for this workload's arguments"), &ex.device().info());
      ++unusable;
      continue;
    }
    PersistentCache* cache = ex.persistent_cache();
    if (r.tuned && !cache)
      throw IoError("the persistent cache " + default_cache_path().string() + " could not be opened: " + item.name +
                    " was tuned but cannot be stored");
    if (r.tuned) cache->put(r.entry, r.measurements, DeviceRecord::of(ex.device().info()));
    if (!r.tuned) ++unusable;
    if (g.verbose) progress.above([&] { fmt::print(stderr, "{}\n", r.report); });
    Row row = row_of(item, r);
    p.roofline(row, item);
    report.add(std::move(row), &ex.device().info());
  }
  progress.finish();
  finish_run(p, report, f, g, unusable);
}

#ifdef EJK_HAVE_MPI
// Under mpirun: rank 0 plans and stores, every rank tunes (ejk/distributed.hpp).
void tune_ranks(const MpiSession& session, const Workset& w, const TuneOptions& opts, const TuneFlags& f, Globals& g);

void tune_over_mpi(const Workset& w, const TuneOptions& opts, const TuneFlags& f, Globals& g) {
  MpiSession session;
  try {
    tune_ranks(session, w, opts, f, g);
  } catch (const std::exception& e) {
    // The session aborts the job as it unwinds (other ranks may wait on this one): say why first.
    if (session.size() > 1) fmt::print(stderr, "ejk: rank {}: {}\n", session.rank(), e.what());
    throw;
  }
}

void tune_ranks(const MpiSession& session, const Workset& w, const TuneOptions& opts, const TuneFlags& f, Globals& g) {
  const bool root = session.rank() == 0;
  Plan p;
  std::vector<DistributedTask> tasks;
  if (root) {
    p = plan(w, f.force);
    for (std::size_t i : p.to_tune) tasks.push_back({w.items[i].invocation, w.items[i].device});
  }
  std::optional<PersistentCache> cache;
  if (root) cache.emplace(default_cache_path());
  Progress progress(tasks.size(), root && !g.quiet);
  // Stored as each arrives, so a job aborted by a dying rank keeps what was measured.
  auto store = [&](std::size_t t, const DistributedResult& r) {
    progress.step(w.items[p.to_tune[t]].name);
    if (r.result && r.result->tuned) cache->put(r.result->entry, r.result->measurements, r.device);
  };
  DistributedOutcome out = tune_distributed(session, tasks, {opts, g.device}, store);
  progress.finish();
  if (!root) return;

  for (const auto& line : out.rank_failures)
    fmt::print(stderr, "ejk: {}; its invocations were tuned again on rank 0\n", line);
  Progress none(0, false);
  Report report(w.names(), true, !g.quiet, g.json_path, none, p.first_ceilings());
  int unusable = 0;
  std::size_t t = 0;
  for (std::size_t i = 0; i < w.items.size(); ++i) {
    if (p.rows[i]) {
      report.add(std::move(*p.rows[i]), p.first_device);
      continue;
    }
    if (t >= p.to_tune.size() || p.to_tune[t] != i) continue;
    const DistributedResult& r = out.results[t++];
    if (!r.result) {
      report.add(failed_row(w.items[i], r.error), p.first_device);
      ++unusable;
      continue;
    }
    if (g.verbose) fmt::print(stderr, "{}\n", r.result->report);
    Row row = row_of(w.items[i], *r.result);
    p.roofline(row, w.items[i]);
    if (!r.result->tuned) ++unusable;
    // The key of an entry measured on another rank's device carries that device's fingerprint.
    if (r.result->tuned) p.keys.push_back(r.result->entry.key());
    std::string where = r.redone ? fmt::format("rank 0 (again, after {})", r.error) : fmt::format("rank {}", r.rank);
    row.note = row.note.empty() ? "tuned on " + where : row.note + "; tuned on " + where;
    report.add(std::move(row), p.first_device);
  }
  std::sort(p.keys.begin(), p.keys.end());
  p.keys.erase(std::unique(p.keys.begin(), p.keys.end()), p.keys.end());
  if (!g.quiet) {
    std::string share;
    for (std::size_t r = 0; r < out.tasks_per_rank.size(); ++r)
      share += fmt::format("{}rank {}: {}", r ? ", " : "", r, out.tasks_per_rank[r]);
    fmt::print("distributed over {} ranks ({})\n", out.size, share);
  }
  finish_run(p, report, f, g, unusable);
}
#endif

}  // namespace

void add_tune(CLI::App& app, Globals& g) {
  auto f = std::make_shared<TuneFlags>();
  auto* cmd = app.add_subcommand(
      "tune",
      "tune every invocation of a recipe or trace on its device and store the winners in the persistent cache\n"
      "  example: ejk tune recipes/quickstart.yaml\n"
      "  example: ejk tune trace.jsonl --strategy model --evals 40 --isolate\n"
      "  example: mpirun -n 4 ejk tune recipes/quickstart.yaml --bundle tuned.json  (docs/scale-out.md)");
  cmd->add_option("workload", f->path, "recipe (.yaml) or trace (.jsonl)")->required();
  cmd->add_option("--strategy", f->strategy, "exhaustive | random | anneal | model (default: the recipe's, else anneal)");
  cmd->add_option("--evals", f->evals,
                  "candidates per invocation, 0 to 2^31-1; 0: the strategy's default (default: the recipe's)");
  cmd->add_option("--seconds", f->seconds, "seconds per invocation, 0 to 1e9; 0: unbounded (default: the recipe's)");
  cmd->add_option("--race", f->race,
                  "drop a variant whose best guess runs this many times slower than the best, 0 or 1 to 1e9; "
                  "0: no race (default: the recipe's, else 4)");
  cmd->add_option("--seed", f->seed, "search seed, 0 to 2^63-1; 0: a fresh one (default: the recipe's)");
  cmd->add_flag("--isolate", f->isolate, "run candidates in a worker process that is killed on a crash or hang");
  cmd->add_flag("--force", f->force, "tune again invocations the persistent cache already has");
  cmd->add_flag("--cold", f->cold,
                "start every search from the heuristic alone, not also from the nearest cached or profiled workload's config");
  cmd->add_option("--bundle", f->bundle, "also write this run's entries (tuned now or already cached) as a bundle to FILE");
  cmd->callback([f, &g] {
    // The options first: a mistake in them is reported before the workload is read.
    TuneOptions opts;
    if (!f->strategy.empty()) opts.strategy = parse_strategy(f->strategy);
    std::optional<int> evals;
    std::optional<double> seconds;
    std::optional<std::uint64_t> seed;
    if (!f->evals.empty())
      evals = static_cast<int>(integer_option("--evals", f->evals, 0, std::numeric_limits<int>::max()));
    if (!f->seconds.empty()) seconds = number_option("--seconds", f->seconds, 0, 1e9);
    std::optional<double> race;
    if (!f->race.empty()) {
      race = number_option("--race", f->race, 0, 1e9);
      if (*race > 0 && *race < 1) throw InvalidArgument("--race must be 0 (no race) or at least 1, got " + f->race);
    }
    if (!f->seed.empty())
      seed = static_cast<std::uint64_t>(integer_option("--seed", f->seed, 0, std::numeric_limits<std::int64_t>::max()));

    Workset w = load_workset(f->path, g);
    TuneSettings s = w.tune.value_or(TuneSettings{});
    if (f->strategy.empty()) opts.strategy = parse_strategy(s.strategy);
    opts.budget.evaluations = evals.value_or(s.evals);
    opts.budget.seconds = seconds.value_or(s.seconds);
    opts.budget.race_ratio = race.value_or(s.race);
    opts.seed = seed.value_or(s.seed);
    opts.isolate = f->isolate;
    opts.constraints = s.constraints;
    check_constraints(w, s);

    if (launched_by_mpi()) {
#ifdef EJK_HAVE_MPI
      tune_over_mpi(w, opts, *f, g);
      return;
#else
      // Without MPI the ranks cannot share the work: rank 0 does all of it, the others nothing.
      const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
      if (rank && std::string(rank) != "0") {
        fmt::print(stderr, "ejk: built without MPI (EJK_WITH_MPI=OFF): rank {} leaves the tuning to rank 0\n", rank);
        return;
      }
#endif
    }
    tune_here(w, opts, *f, g);
  });
}

}  // namespace ejk::app
