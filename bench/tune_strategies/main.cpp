// ejk_tune_strategies: how well each search strategy tunes matmul.
//
// For each shape: an exhaustive tune on the device (its table of every candidate is stored
// as JSON, or reused with --reuse), then, in simulation over that table, the number of
// evaluations each strategy needs to come within 5% of the exhaustive best (median over
// seeds, as a fraction of the space), and finally a real tune with the model strategy on 30%
// of the space: its tuning time, its pick against the exhaustive best, and the speedup of
// the tuned config over the heuristic (paired re-run).
//
//   ejk_tune_strategies [--device cpu] [--shapes 256x256x256,512x512x512] [--seeds 5]
//                       [--out bench/results/tune] [--reuse] [--dtype f32]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ejk/ejk.hpp"
#include "matmul/matmul.hpp"

namespace {

using namespace ejk;

struct Shape3 {
  std::int64_t m, n, k;
};

std::vector<Shape3> parse_shapes(const std::string& text) {
  std::vector<Shape3> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    Shape3 s{};
    if (std::sscanf(item.c_str(), "%ldx%ldx%ld", &s.m, &s.n, &s.k) != 3)
      throw InvalidArgument("shape '" + item + "' is not MxNxK");
    out.push_back(s);
  }
  return out;
}

std::size_t evaluations_to(const SearchResult& r, double target) {
  for (std::size_t i = 0; i < r.evaluated.size(); ++i)
    if (r.evaluated[i].status == Status::ok && r.evaluated[i].stats.median_ns <= target) return i + 1;
  return r.evaluated.size() + 1;  // never: counts as more than the space
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  std::size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  std::string device_name = "cpu", shapes_text = "256x256x256,512x512x512,1024x1024x1024,64x1024x1024";
  std::string out_dir = "bench/results/tune", dtype_name = "f32";
  int seeds = 5;
  bool reuse = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw InvalidArgument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--device") device_name = next();
    else if (a == "--shapes") shapes_text = next();
    else if (a == "--seeds") seeds = std::stoi(next());
    else if (a == "--out") out_dir = next();
    else if (a == "--dtype") dtype_name = next();
    else if (a == "--reuse") reuse = true;
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  auto device = open_device(device_name);
  DType dtype = parse_dtype(dtype_name);
  std::filesystem::create_directories(out_dir);
  std::printf("device: %s (%s)\n", device->info().id().c_str(), device->info().name.c_str());
  std::printf("| shape | space | exhaustive time | best | heuristic | speedup | random | anneal | model | "
              "exhaustive order | model 30%%: time, pick vs best, speedup |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  nlohmann::json summary = nlohmann::json::array();

  for (const auto& s : parse_shapes(shapes_text)) {
    Invocation inv = kernels::matmul::invocation({{s.m, s.k}, dtype}, {{s.k, s.n}, dtype}, {{s.m, s.n}, dtype}, false,
                                                 false, 1.0, 0.0);
    std::string tag = device_name + "_" + dtype_name + "_" + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                      std::to_string(s.k);
    for (auto& c : tag)
      if (c == ':') c = '_';
    std::string path = out_dir + "/exhaustive_" + tag + ".json";

    TuneResult ex;
    if (reuse && std::filesystem::exists(path)) {
      std::ifstream in(path);
      ex = TuneResult::from_json(nlohmann::json::parse(in));
    } else {
      TuneOptions o;
      o.strategy = Strategy::exhaustive;
      o.seed = 1;
      ex = tune(inv, *device, o);
      std::ofstream(path) << ex.to_json().dump(1) << "\n";
    }
    std::fprintf(stderr, "%s", ex.report.c_str());
    MeasurementTable table = MeasurementTable::from_result(ex);
    const double best = table.best_ns();
    const double target = best * 1.05;
    const std::size_t n = table.size();

    nlohmann::json row = {{"shape", {s.m, s.n, s.k}},
                          {"space", n},
                          {"exhaustive_seconds", ex.seconds},
                          {"best_ns", best},
                          {"best", ex.entry.config.to_json()},
                          {"heuristic_ns", ex.heuristic_measurement ? ex.heuristic_measurement->stats.median_ns : 0},
                          {"speedup", ex.speedup}};
    // The same searches over the table ranked by each candidate's fastest sample instead of
    // its median: on a busy machine the minimum is the least disturbed estimate.
    std::vector<Measurement> by_min_rows = table.rows();
    for (auto& m : by_min_rows) m.stats.median_ns = m.stats.min_ns;
    MeasurementTable by_min(by_min_rows);
    std::string cells, min_cells;
    for (Strategy st : {Strategy::random, Strategy::anneal, Strategy::model}) {
      for (const MeasurementTable* t : {&table, &by_min}) {
        std::vector<double> fractions;
        for (int seed = 1; seed <= seeds; ++seed) {
          Budget b;
          b.target_ns = t->best_ns();
          b.target_within = 0.05;
          SearchResult r = simulate(*t, st, b, static_cast<std::uint64_t>(seed));
          fractions.push_back(static_cast<double>(evaluations_to(r, t->best_ns() * 1.05)) / static_cast<double>(n));
        }
        double med = median(fractions);
        row[std::string(to_string(st)) + (t == &table ? "" : "_by_min")] = {{"fractions", fractions}, {"median", med}};
        char buf[32];
        std::snprintf(buf, sizeof buf, " %.1f%% |", 100 * med);
        (t == &table ? cells : min_cells) += buf;
      }
    }
    auto within = [&](const MeasurementTable& t) {
      int k = 0;
      for (const auto& m : t.rows())
        if (m.status == Status::ok && m.stats.median_ns <= t.best_ns() * 1.05) ++k;
      return k;
    };
    row["within_5pct"] = within(table);
    row["within_5pct_by_min"] = within(by_min);
    SearchResult in_order = simulate(table, Strategy::exhaustive, {}, 1);
    double order_fraction = static_cast<double>(evaluations_to(in_order, target)) / static_cast<double>(n);
    row["exhaustive_order"] = order_fraction;

    // A real tune with the model strategy on 30% of the space.
    TuneOptions o;
    o.strategy = Strategy::model;
    o.seed = 1;
    o.budget.evaluations = static_cast<int>((n * 3 + 9) / 10);
    TuneResult mr = tune(inv, *device, o);
    std::fprintf(stderr, "%s", mr.report.c_str());
    const Measurement* pick = table.find(mr.entry.config);
    double pick_ratio = pick && pick->status == Status::ok ? pick->stats.median_ns / best : 0;
    row["model_real"] = {{"seconds", mr.seconds},
                         {"evaluations", mr.measurements.size()},
                         {"pick", mr.entry.config.to_json()},
                         {"pick_vs_exhaustive_best", pick_ratio},
                         {"speedup", mr.speedup}};
    summary.push_back(row);

    std::printf("| %ldx%ldx%ld | %zu (%d within 5%%) | %.0f s | %.3f ms | %.3f ms | %.2fx |%s %.1f%% | %.0f s, %.3fx, %.2fx |\n",
                s.m, s.n, s.k, n, within(table), ex.seconds, best * 1e-6, row["heuristic_ns"].get<double>() * 1e-6,
                ex.speedup, cells.c_str(), 100 * order_fraction, mr.seconds, pick_ratio, mr.speedup);
    std::printf("| (by min) | (%d within 5%%) | | %.3f ms | | |%s | |\n", within(by_min), by_min.best_ns() * 1e-6,
                min_cells.c_str());
    std::fflush(stdout);
  }
  std::string dev_tag = device_name;
  for (auto& c : dev_tag)
    if (c == ':') c = '_';
  std::ofstream(out_dir + "/summary_" + dev_tag + ".json") << summary.dump(1) << "\n";
  return 0;
}
