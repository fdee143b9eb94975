#include <numeric>

#include "tune/strategy.hpp"

namespace ejk::tuning {

namespace {

// Every candidate in order.
class Exhaustive final : public SearchStrategy {
 public:
  void run(Session& s, const Candidates& c, Rng& /*rng*/, const Lookahead& lookahead) const override {
    std::vector<std::size_t> order(c.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    evaluate_in_order(s, c, order, lookahead);
  }
};

}  // namespace

const SearchStrategy& exhaustive_strategy() {
  static const Exhaustive s;
  return s;
}

}  // namespace ejk::tuning
