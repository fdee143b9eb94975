#include "tune/search.hpp"

#include "tune/strategy.hpp"

namespace ejk::tuning {

namespace {

const SearchStrategy& strategy_of(Strategy s) {
  switch (s) {
    case Strategy::exhaustive: return exhaustive_strategy();
    case Strategy::random: return random_strategy();
    case Strategy::anneal: return anneal_strategy();
    case Strategy::model: return model_strategy();
  }
  return random_strategy();
}

}  // namespace

SearchResult search(const Candidates& cands, Strategy strategy, const Budget& budget, std::uint64_t seed,
                    const std::vector<std::size_t>& start, const Evaluate& evaluate, const Progress& progress,
                    const Lookahead& lookahead) {
  Session s(cands, strategy, budget, evaluate, progress);
  Rng rng(seed);
  for (std::size_t i : start) {
    if (s.finished()) break;
    if (i < cands.size() && !s.evaluated(i)) s.evaluate(i);
  }
  if (budget.race_ratio > 1) race(s, cands, start, budget.race_ratio, lookahead);
  strategy_of(strategy).run(s, cands, rng, lookahead);
  s.finished();
  return std::move(s.result);
}

}  // namespace ejk::tuning
