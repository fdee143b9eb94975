#include "ejk/tuner.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <map>
#include <optional>
#include <random>
#include <unistd.h>

#include "ejk/error.hpp"
#include "ejk/registry.hpp"
#include "ejk/version.hpp"
#include "tune/bench.hpp"
#include "tune/prebuild.hpp"
#include "tune/search.hpp"
#include "tune/stats.hpp"
#include "tune/verdict.hpp"
#include "tune/worker.hpp"

namespace ejk {

std::string_view to_string(Strategy s) {
  switch (s) {
    case Strategy::exhaustive: return "exhaustive";
    case Strategy::random: return "random";
    case Strategy::anneal: return "anneal";
    case Strategy::model: return "model";
  }
  return "?";
}

Strategy parse_strategy(std::string_view name) {
  for (Strategy s : {Strategy::exhaustive, Strategy::random, Strategy::anneal, Strategy::model})
    if (to_string(s) == name) return s;
  throw InvalidArgument("unknown tuning strategy '" + std::string(name) +
                        "' (expected exhaustive, random, anneal or model)");
}

namespace {

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

std::uint64_t fresh_seed() {
  std::random_device rd;
  std::uint64_t s = (std::uint64_t{rd()} << 32) ^ rd();
  return s ? s : 1;
}

std::string format_ns(double ns) {
  char buf[32];
  if (ns >= 1e9) std::snprintf(buf, sizeof buf, "%.3g s", ns * 1e-9);
  else if (ns >= 1e6) std::snprintf(buf, sizeof buf, "%.3g ms", ns * 1e-6);
  else if (ns >= 1e3) std::snprintf(buf, sizeof buf, "%.3g us", ns * 1e-3);
  else std::snprintf(buf, sizeof buf, "%.3g ns", ns);
  return buf;
}

std::string format_g(double x, const char* fmt = "%.3g") {
  char buf[32];
  std::snprintf(buf, sizeof buf, fmt, x);
  return buf;
}

std::optional<std::size_t> implementation_index(const Implementation& impl) {
  auto impls = Registry::global().implementations(impl.kernel());
  for (std::size_t i = 0; i < impls.size(); ++i)
    if (impls[i] == &impl) return i;
  return std::nullopt;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// TuneResult JSON

nlohmann::json TuneResult::to_json() const {
  nlohmann::json ms = nlohmann::json::array(), rr = nlohmann::json::array();
  for (const auto& m : measurements) ms.push_back(m.to_json());
  for (const auto& m : rerank) rr.push_back(m.to_json());
  return {{"invocation", invocation.to_json()},
          {"device", device},
          {"entry", entry.to_json()},
          {"tuned", tuned},
          {"strategy", strategy},
          {"seed", seed},
          {"space_size", space_size},
          {"measurements", ms},
          {"heuristic", heuristic.to_json()},
          {"heuristic_measurement", heuristic_measurement ? heuristic_measurement->to_json() : nlohmann::json()},
          {"rerank", rr},
          {"speedup", speedup},
          {"warm_start", warm_start ? nlohmann::json{{"config", warm_start->config.to_json()}, {"source", warm_start->source}}
                                    : nlohmann::json()},
          {"warm_measurement", warm_measurement ? warm_measurement->to_json() : nlohmann::json()},
          {"evaluations_to_near_best", evaluations_to_near_best},
          {"warm_share", warm_share},
          {"validated", validated},
          {"seconds", seconds},
          {"report", report}};
}

TuneResult TuneResult::from_json(const nlohmann::json& j) {
  try {
    TuneResult r;
    r.invocation = Invocation::from_json(j.at("invocation"));
    r.device = j.value("device", "");
    r.entry = CacheEntry::from_json(j.at("entry"));
    r.tuned = j.value("tuned", false);
    r.strategy = j.value("strategy", "");
    r.seed = j.value("seed", std::uint64_t{0});
    r.space_size = j.value("space_size", std::size_t{0});
    for (const auto& m : j.at("measurements")) r.measurements.push_back(Measurement::from_json(m));
    if (j.contains("heuristic")) r.heuristic = Config::from_json(j.at("heuristic"));
    if (j.contains("heuristic_measurement") && !j.at("heuristic_measurement").is_null())
      r.heuristic_measurement = Measurement::from_json(j.at("heuristic_measurement"));
    if (j.contains("rerank"))
      for (const auto& m : j.at("rerank")) r.rerank.push_back(Measurement::from_json(m));
    r.speedup = j.value("speedup", 0.0);
    if (j.contains("warm_start") && !j.at("warm_start").is_null())
      r.warm_start = WarmStart{Config::from_json(j.at("warm_start").at("config")), j.at("warm_start").value("source", "")};
    if (j.contains("warm_measurement") && !j.at("warm_measurement").is_null())
      r.warm_measurement = Measurement::from_json(j.at("warm_measurement"));
    r.evaluations_to_near_best = j.value("evaluations_to_near_best", std::size_t{0});
    r.warm_share = j.value("warm_share", 0.0);
    r.validated = j.value("validated", "");
    r.seconds = j.value("seconds", 0.0);
    r.report = j.value("report", "");
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(std::string("malformed tuning result: ") + e.what());
  }
}

// ---------------------------------------------------------------------------------------------
// tune

TuneResult tune(const Invocation& inv, Device& device, const TuneOptions& options) {
  Registry& reg = Registry::global();
  reg.kernel(inv.kernel).validate(inv);
  return tune(inv, reg.implementation(inv, device.info()), device, options);
}

namespace {

// The implementation's space with the options' constraints that read its parameters (one that
// reads none is meant for another kernel), enumerated.
std::vector<Config> candidates(const Invocation& inv, const Implementation& impl, const DeviceInfo& dev,
                               const std::vector<std::string>& constraints) {
  ParamSpace space = impl.space(inv, dev);
  for (const auto& text : constraints) {
    Expr e = Expr::parse(text);
    bool mine = false;
    for (const auto& name : e.names())
      for (const auto& p : space.params()) mine = mine || p.name == name;
    if (mine) space.constraint(text);
  }
  return space.enumerate();
}

// Where candidates run: a bench in this process, or one in a worker process (isolation).
class Runner {
 public:
  Runner(const Invocation& inv, const Implementation& impl, Device& device, const tuning::BenchSettings& settings,
         const TuneOptions& o) {
    if (!o.isolate) {
      bench_ = std::make_unique<tuning::Bench>(inv, impl, device, settings);
      return;
    }
    auto idx = implementation_index(impl);
    if (!idx)
      throw InvalidArgument("tuning " + inv.kernel + " in isolation: its implementation is not in the registry, so a "
                            "worker cannot find it");
    nlohmann::json setup = {{"op", "setup"},
                            {"device", device.info().id()},
                            {"impl", *idx},
                            {"invocation", inv.to_json()},
                            {"settings", settings.to_json()}};
    isolated_ = std::make_unique<tuning::IsolatedRunner>(o.worker.empty() ? find_worker() : o.worker, setup, o);
    isolated_->start();
  }

  Measurement measure(const Config& c, double best_ns) {
    // Reading back or checking a candidate's output can fail too (a lost device, say): that is
    // this candidate's result, not the end of the tune.
    try {
      return isolated_ ? isolated_->measure(c, best_ns) : bench_->measure(c, best_ns);
    } catch (...) {
      return tuning::classify(c, std::current_exception(), "after the run");
    }
  }
  void rerank(const std::vector<Config>& configs, int rounds, double slowest, std::vector<std::vector<double>>& samples,
              std::vector<std::string>& errors) {
    if (isolated_) isolated_->rerank(configs, rounds, slowest, samples, errors);
    else bench_->rerank(configs, rounds, samples, errors);
  }
  std::string validated() const { return isolated_ ? isolated_->validated() : bench_->validated(); }
  int restarts() const { return isolated_ ? isolated_->restarts() : 0; }

 private:
  std::unique_ptr<tuning::Bench> bench_;
  std::unique_ptr<tuning::IsolatedRunner> isolated_;
};

// The best few (and the heuristic, for an honest speedup) re-run interleaved and paired: fills
// out.rerank and out.speedup and returns the winner among out.measurements (null: none ran).
// `paired` says whether the speedup came from paired samples.
const Measurement* rerun_best(TuneResult& out, Runner& runner, const TimingOptions& timing, bool& paired) {
  paired = false;
  std::vector<const Measurement*> ok;
  for (const auto& m : out.measurements)
    if (m.status == Status::ok && m.stats.n > 0) ok.push_back(&m);
  std::stable_sort(ok.begin(), ok.end(),
                   [](const Measurement* a, const Measurement* b) { return a->stats.median_ns < b->stats.median_ns; });
  const Measurement* winner = ok.empty() ? nullptr : ok.front();
  const bool heuristic_ok = out.heuristic_measurement && out.heuristic_measurement->status == Status::ok;
  std::vector<Config> rerun;
  double slowest = 0;
  for (std::size_t i = 0; i < ok.size() && static_cast<int>(i) < timing.rerank_top; ++i) {
    rerun.push_back(ok[i]->config);
    slowest = std::max(slowest, ok[i]->stats.median_ns);
  }
  if (heuristic_ok && !rerun.empty() && std::find(rerun.begin(), rerun.end(), out.heuristic) == rerun.end()) {
    rerun.push_back(out.heuristic);
    slowest = std::max(slowest, out.heuristic_measurement->stats.median_ns);
  }
  if (rerun.size() >= 2 && timing.rerank_rounds > 0) {
    std::vector<std::vector<double>> samples;
    std::vector<std::string> errors;
    runner.rerank(rerun, timing.rerank_rounds, slowest, samples, errors);
    constexpr auto none = static_cast<std::size_t>(-1);
    std::size_t best_slot = none, heuristic_slot = none;
    for (std::size_t i = 0; i < rerun.size(); ++i) {
      Measurement m;
      m.config = rerun[i];
      if (!errors[i].empty() || samples[i].empty()) {
        m.status = Status::runtime;
        m.message = "re-run failed: " + (errors[i].empty() ? std::string("no samples") : errors[i]);
      } else {
        m.stats = tuning::summarize(samples[i]);
        if (best_slot == none || m.stats.median_ns < out.rerank[best_slot].stats.median_ns) best_slot = i;
      }
      if (rerun[i] == out.heuristic) heuristic_slot = i;
      out.rerank.push_back(std::move(m));
    }
    if (best_slot != none) {
      for (const auto* m : ok)
        if (m->config == rerun[best_slot]) winner = m;
      // Paired speedup: per round, heuristic time over winner time.
      if (heuristic_slot != none && out.rerank[heuristic_slot].status == Status::ok &&
          samples[heuristic_slot].size() == samples[best_slot].size()) {
        std::vector<double> ratios;
        for (std::size_t k = 0; k < samples[best_slot].size(); ++k)
          ratios.push_back(samples[heuristic_slot][k] / samples[best_slot][k]);
        out.speedup = tuning::median(ratios);
        paired = true;
      }
    }
  }
  if (winner && out.speedup == 0 && heuristic_ok && winner->stats.median_ns > 0)
    out.speedup = out.heuristic_measurement->stats.median_ns / winner->stats.median_ns;
  return winner;
}

// The cache entry a tune stores: the winner, else the heuristic, with where it came from.
CacheEntry entry_of(const TuneResult& out, const Implementation& impl, const DeviceInfo& dev, const Measurement* winner) {
  CacheEntry e;
  e.fingerprint = dev.fingerprint();
  e.kernel = out.invocation.kernel;
  e.version = Registry::global().version(impl);
  e.signature = out.invocation.signature();
  e.config = winner ? winner->config : out.heuristic;
  if (winner) e.stats = winner->stats;
  e.provenance.tool_version = std::string(tool_version());
  e.provenance.strategy = out.strategy;
  e.provenance.host = host_name();
  e.provenance.created_unix = static_cast<std::int64_t>(std::time(nullptr));
  e.provenance.evaluations = static_cast<int>(out.measurements.size());
  e.provenance.seed = out.seed;
  return e;
}

// TuneResult::report: what ran, how it ended, what won.
std::string report_of(const TuneResult& out, const SearchResult& r, const Measurement* winner, bool paired,
                      int restarts) {
  std::map<Status, int> counts;
  int abandoned = 0;
  for (const auto& m : out.measurements) {
    ++counts[m.status];
    if (m.status == Status::ok && m.message.starts_with("abandoned")) ++abandoned;
  }
  std::string rep = out.invocation.kernel + " " + out.invocation.signature() + " on " + out.device + ": " + out.strategy +
                    " (seed " + std::to_string(out.seed) + ") evaluated " + std::to_string(out.measurements.size()) +
                    " of " + std::to_string(out.space_size) + " candidates in " + format_g(out.seconds, "%.3g") + " s (" +
                    r.stopped + ")\n";
  rep += "results: ok " + std::to_string(counts[Status::ok]);
  if (abandoned) rep += " (" + std::to_string(abandoned) + " abandoned early as far slower than the best)";
  for (Status s : {Status::compile, Status::device_limits, Status::runtime, Status::validation, Status::timeout,
                   Status::skipped})
    if (counts[s]) rep += ", " + std::string(to_string(s)) + " " + std::to_string(counts[s]);
  rep += "; checked against: " + out.validated + "\n";
  if (!r.raced.empty()) rep += "race: dropped " + r.raced + "\n";
  if (restarts) rep += "isolation: worker restarted " + std::to_string(restarts) + " times\n";
  if (!winner)
    return rep + "no candidate ran and validated: falling back to the heuristic config " + out.heuristic.canonical() + "\n";
  rep += "best: " + winner->config.canonical() + " " + format_ns(winner->stats.median_ns) + " (IQR " +
         format_g(100 * tuning::spread(winner->stats), "%.2g") + "%, n " + std::to_string(winner->stats.n) + ")";
  if (out.heuristic_measurement && out.heuristic_measurement->status == Status::ok)
    rep += "; heuristic " + out.heuristic.canonical() + " " + format_ns(out.heuristic_measurement->stats.median_ns) +
           "; speedup " + format_g(out.speedup, "%.3g") + "x" + (paired ? " (paired re-run)" : "");
  return rep + "\n";
}

// "warm start {...} (persistent cache: ...): 1.2 ms, 1.31x the heuristic, 92% of the gain;
// within 5% of the best after 2 evaluations".
std::string warm_line(const TuneResult& out) {
  std::string line;
  if (out.warm_start) {
    line = "warm start " + out.warm_start->config.canonical() + " (" + out.warm_start->source + ")";
    const Measurement* w = out.warm_measurement ? &*out.warm_measurement : nullptr;
    if (w && w->status == Status::ok && w->stats.median_ns > 0) {
      line += ": " + format_ns(w->stats.median_ns);
      if (out.heuristic_measurement && out.heuristic_measurement->status == Status::ok)
        line += ", " + format_g(out.heuristic_measurement->stats.median_ns / w->stats.median_ns, "%.3g") + "x the heuristic";
      if (auto share = tuning::warm_share(out)) line += ", " + format_g(100 * *share, "%.3g") + "% of the gain";
    } else if (w) {
      line += ": " + std::string(to_string(w->status));
    }
    line += "; ";
  }
  if (out.evaluations_to_near_best)
    line += "within " + format_g(100 * tuning::near_best, "%.3g") + "% of the best after " +
            std::to_string(out.evaluations_to_near_best) + " evaluations";
  return line.empty() ? line : line + "\n";
}

}  // namespace

namespace tuning {

namespace {
// The fastest median among the ok measurements; 0 when none is ok.
double fastest_ns(const std::vector<Measurement>& measured) {
  double best = 0;
  for (const auto& m : measured)
    if (m.status == Status::ok && m.stats.median_ns > 0 && (best == 0 || m.stats.median_ns < best)) best = m.stats.median_ns;
  return best;
}
}  // namespace

std::size_t evaluations_to_near_best(const std::vector<Measurement>& measured) {
  const double best = fastest_ns(measured);
  if (best == 0) return 0;
  for (std::size_t i = 0; i < measured.size(); ++i)
    if (measured[i].status == Status::ok && measured[i].stats.median_ns > 0 &&
        measured[i].stats.median_ns <= best * (1 + near_best))
      return i + 1;
  return 0;
}

std::optional<double> warm_share(const TuneResult& out) {
  if (!out.warm_measurement || !out.heuristic_measurement) return std::nullopt;
  const Measurement &w = *out.warm_measurement, &h = *out.heuristic_measurement;
  if (w.status != Status::ok || h.status != Status::ok) return std::nullopt;
  const double best = fastest_ns(out.measurements);
  const double gain = h.stats.median_ns - best;
  if (best == 0 || gain <= 0) return std::nullopt;
  return std::clamp((h.stats.median_ns - w.stats.median_ns) / gain, 0.0, 1.0);
}

const Measurement* keep_heuristic_unless_ahead(const TuneResult& out, const Measurement* best, bool paired, bool& kept) {
  kept = false;
  if (!best || !paired || best->config == out.heuristic || out.speedup >= 1.0 + displace_margin) return best;
  for (const auto& m : out.rerank)
    if (m.config == out.heuristic && m.status == Status::ok) {
      kept = true;
      return &m;
    }
  return best;
}

}  // namespace tuning

// Phases: the candidates, a runner for them, the search (the heuristic first, programs built
// ahead), a paired re-run of the best, the cache entry and the report.
TuneResult tune(const Invocation& inv, const Implementation& impl, Device& device, const TuneOptions& o) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  Registry::global().kernel(inv.kernel).validate(inv);
  const DeviceInfo& dev = device.info();

  TuneResult out;
  out.invocation = inv;
  out.device = dev.id();
  out.strategy = std::string(to_string(o.strategy));
  out.seed = o.seed ? o.seed : fresh_seed();
  const std::vector<Config> configs = candidates(inv, impl, dev, o.constraints);
  out.space_size = configs.size();
  out.heuristic = impl.heuristic(inv, dev);

  tuning::BenchSettings settings;
  settings.timing = o.timing;
  settings.validate = o.validate;
  settings.reference_flops_limit = o.reference_flops_limit;
  settings.input_seed = o.input_seed ? o.input_seed : fresh_seed();
  settings.trusted = out.heuristic;
  Runner runner(inv, impl, device, settings, o);
  auto measure = [&](const Config& c, double best_ns) { return runner.measure(c, best_ns); };

  tuning::Candidates cands(configs);
  std::vector<std::size_t> start;
  auto hidx = cands.find(out.heuristic);
  if (hidx) start.push_back(*hidx);
  else out.heuristic_measurement = measure(out.heuristic, 0);  // a baseline outside the space
  if (o.warm_start)
    if (auto widx = cands.find(o.warm_start->config)) {
      out.warm_start = o.warm_start;
      if (widx != hidx) start.push_back(*widx);
    }
  std::optional<tuning::Prebuilder> prebuilder;
  if (const int threads = tuning::prebuild_threads(o.prebuild_threads, dev); threads > 0)
    prebuilder.emplace(inv, impl, device, threads);
  tuning::Lookahead lookahead;
  if (prebuilder) lookahead = [&](const std::vector<Config>& next) { prebuilder->plan(next); };
  SearchResult r = tuning::search(cands, o.strategy, o.budget, out.seed, start, measure, o.progress, lookahead);
  prebuilder.reset();
  out.measurements = std::move(r.evaluated);
  for (const auto& m : out.measurements) {
    if (hidx && m.config == out.heuristic) out.heuristic_measurement = m;
    if (out.warm_start && m.config == out.warm_start->config) out.warm_measurement = m;
  }
  out.evaluations_to_near_best = tuning::evaluations_to_near_best(out.measurements);
  out.warm_share = tuning::warm_share(out).value_or(0.0);

  bool paired = false, kept = false;
  const Measurement* best = rerun_best(out, runner, o.timing, paired);
  const Measurement* winner = tuning::keep_heuristic_unless_ahead(out, best, paired, kept);
  const double lead = out.speedup;
  if (kept) out.speedup = 1.0;  // what is stored is the heuristic's config
  out.validated = runner.validated();
  out.tuned = winner != nullptr;
  out.entry = entry_of(out, impl, dev, winner);
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  out.report = report_of(out, r, best, paired, runner.restarts());
  out.report += warm_line(out);
  if (kept)
    out.report += "kept the heuristic's config: the best was " + format_g(lead, "%.3g") +
                  "x faster in the paired re-run, under the " + format_g(100 * tuning::displace_margin, "%.3g") + "% margin\n";
  return out;
}

Measurement measure(const Invocation& inv, const Config& config, Device& device, const TimingOptions& timing, bool check,
                    double reference_flops_limit) {
  return measure(inv, [&](std::span<const Tensor>) { return config; }, device, timing, check, reference_flops_limit);
}

Measurement measure(const Invocation& inv, const std::function<Config(std::span<const Tensor>)>& choose, Device& device,
                    const TimingOptions& timing, bool check, double reference_flops_limit) {
  Registry& reg = Registry::global();
  reg.kernel(inv.kernel).validate(inv);
  const Implementation& impl = reg.implementation(inv, device.info());
  tuning::BenchSettings settings;
  settings.timing = timing;
  settings.validate = check;
  settings.reference_flops_limit = reference_flops_limit;
  settings.input_seed = fresh_seed();
  settings.trusted = impl.heuristic(inv, device.info());
  tuning::Bench bench(inv, impl, device, settings);
  const Config config = choose(bench.arguments());
  return bench.measure(config, 0);
}

}  // namespace ejk
