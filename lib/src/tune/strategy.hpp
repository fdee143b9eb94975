#pragma once
// Search strategies behind one interface, a file each in tune/strategies/.
#include "tune/session.hpp"

namespace ejk::tuning {

class SearchStrategy {
 public:
  virtual ~SearchStrategy() = default;
  // Evaluates candidates through the session until it says to stop or the strategy has nothing
  // left to try; tells `lookahead` (when set) what it will evaluate next, without drawing from
  // `rng` for it, so a seed gives the same sequence with or without building ahead.
  virtual void run(Session& s, const Candidates& c, Rng& rng, const Lookahead& lookahead) const = 0;
};

const SearchStrategy& exhaustive_strategy();
const SearchStrategy& random_strategy();
const SearchStrategy& anneal_strategy();
const SearchStrategy& model_strategy();

// Measures each variant's best guess (the variant's config nearest the first start config), then
// excludes the variants whose guess is more than `ratio` times the best one.
void race(Session& s, const Candidates& c, const std::vector<std::size_t>& start, double ratio, const Lookahead& lookahead);

}  // namespace ejk::tuning
