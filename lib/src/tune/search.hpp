#pragma once
// Search strategies over a list of candidate configs, independent of how a candidate is
// measured: the tuner measures on a device, simulate() looks times up in a table.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ejk/config.hpp"
#include "ejk/measurement.hpp"
#include "ejk/tuner.hpp"

namespace ejk::tuning {

// Draws defined by the seed alone, on every standard library (unlike std:: distributions).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : engine_(seed) {}
  std::uint64_t below(std::uint64_t n) { return n ? engine_() % n : 0; }
  double unit() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

 private:
  std::mt19937_64 engine_;
};

// The candidates with the structure strategies read: one axis per parameter, its values in
// order (integers numerically, text as first met), each config's position on every axis.
class Candidates {
 public:
  explicit Candidates(std::vector<Config> configs);

  std::size_t size() const { return configs_.size(); }
  const Config& at(std::size_t i) const { return configs_[i]; }
  const std::vector<Config>& all() const { return configs_; }
  std::optional<std::size_t> find(const Config& c) const;
  std::size_t axes() const { return axes_.size(); }

  // Mean over axes of the per-axis distance: |position difference| / (values - 1) for
  // integers, 0 or 1 for text; a parameter present in one config only counts 1.
  double distance(std::size_t a, std::size_t b) const;
  // A config one step away from i along one random axis: that axis moved to the adjacent
  // value, the other parameters as close to i's as the space admits. nullopt when none.
  std::optional<std::size_t> neighbour(std::size_t i, Rng& rng) const;
  // Every config neighbour(i, rng) can return, whatever the draws.
  std::vector<std::size_t> neighbours(std::size_t i) const;

 private:
  // The configs of `pool` nearest to i.
  std::vector<std::size_t> nearest(std::size_t i, const std::vector<std::size_t>& pool) const;

  struct Axis {
    std::string name;
    std::vector<Value> values;
    bool ordinal = true;
  };
  std::vector<Config> configs_;
  std::vector<Axis> axes_;
  std::vector<std::vector<int>> pos_;                       // [config][axis]: value index, -1 absent
  std::vector<std::vector<std::vector<std::size_t>>> by_;   // [axis][value]: configs holding it
  std::map<std::string, std::size_t, std::less<>> index_;   // canonical -> config
};

using Evaluate = std::function<Measurement(const Config& c, double best_ns)>;
using Progress = std::function<void(const Measurement&, std::size_t evaluated, std::size_t space_size)>;
// The candidates a strategy will evaluate next, in order (a hint for building ahead); called
// by the strategies that know their order.
using Lookahead = std::function<void(const std::vector<Config>&)>;

// Runs `strategy` until the budget is spent or every candidate is evaluated. Candidates in
// `start` are evaluated first. With a deterministic `evaluate`, the same seed gives the same
// sequence.
SearchResult search(const Candidates& cands, Strategy strategy, const Budget& budget, std::uint64_t seed,
                    const std::vector<std::size_t>& start, const Evaluate& evaluate, const Progress& progress = {},
                    const Lookahead& lookahead = {});

// The evaluation cap a budget implies for a space of n candidates.
std::size_t evaluation_limit(const Budget& budget, Strategy strategy, std::size_t n);

}  // namespace ejk::tuning
