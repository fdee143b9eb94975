#include <numeric>
#include <utility>

#include "tune/strategy.hpp"

namespace ejk::tuning {

namespace {

// Every candidate in one shuffled order, drawn up front.
class Random final : public SearchStrategy {
 public:
  void run(Session& s, const Candidates& c, Rng& rng, const Lookahead& lookahead) const override {
    std::vector<std::size_t> order(c.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
    evaluate_in_order(s, c, order, lookahead);
  }
};

}  // namespace

const SearchStrategy& random_strategy() {
  static const Random s;
  return s;
}

}  // namespace ejk::tuning
