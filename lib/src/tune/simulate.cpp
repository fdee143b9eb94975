// Simulation: strategies replayed over stored measurements.
#include <algorithm>

#include "ejk/error.hpp"
#include "ejk/json.hpp"
#include "ejk/tuner.hpp"
#include "tune/search.hpp"

namespace ejk {

MeasurementTable::MeasurementTable(std::vector<Measurement> rows) {
  // The first row of a config wins: a table keeps one measurement per config.
  std::vector<std::pair<std::string, std::size_t>> seen;
  for (auto& m : rows) {
    std::string key = m.config.canonical();
    auto it = std::lower_bound(index_.begin(), index_.end(), std::make_pair(key, std::size_t{0}));
    if (it != index_.end() && it->first == key) continue;
    index_.insert(it, {key, rows_.size()});
    rows_.push_back(std::move(m));
  }
}

MeasurementTable MeasurementTable::from_result(const TuneResult& result) { return MeasurementTable(result.measurements); }

MeasurementTable MeasurementTable::from_json(const nlohmann::json& j) {
  try {
    const nlohmann::json& list = j.is_array() ? j : j.at("measurements");
    std::vector<Measurement> rows;
    for (const auto& m : list) rows.push_back(Measurement::from_json(m));
    return MeasurementTable(std::move(rows));
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(std::string("malformed measurement table: ") + e.what());
  }
}

MeasurementTable MeasurementTable::load(const std::string& path) {
  nlohmann::json j;
  try {
    j = read_json_file(path);
  } catch (const InvalidArgument& e) {
    throw IoError(std::string("measurement table ") + e.what());
  }
  return from_json(j);
}

std::vector<Config> MeasurementTable::configs() const {
  std::vector<Config> out;
  for (const auto& m : rows_) out.push_back(m.config);
  return out;
}

const Measurement* MeasurementTable::find(const Config& c) const {
  std::string key = c.canonical();
  auto it = std::lower_bound(index_.begin(), index_.end(), std::make_pair(key, std::size_t{0}));
  if (it == index_.end() || it->first != key) return nullptr;
  return &rows_[it->second];
}

double MeasurementTable::best_ns() const {
  double best = 0;
  for (const auto& m : rows_)
    if (m.status == Status::ok && m.stats.n > 0 && (best == 0 || m.stats.median_ns < best)) best = m.stats.median_ns;
  return best;
}

SearchResult simulate(const MeasurementTable& table, Strategy strategy, const Budget& budget, std::uint64_t seed,
                      const std::vector<Config>& start) {
  tuning::Candidates cands(table.configs());
  std::vector<std::size_t> first;
  for (const auto& c : start) {
    auto i = cands.find(c);
    if (!i) throw InvalidArgument("start config " + c.canonical() + " is not in the measurement table");
    first.push_back(*i);
  }
  auto evaluate = [&](const Config& c, double /*best_ns*/) { return *table.find(c); };
  return tuning::search(cands, strategy, budget, seed, first, evaluate);
}

}  // namespace ejk
