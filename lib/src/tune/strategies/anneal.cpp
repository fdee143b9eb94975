#include <algorithm>
#include <cmath>

#include "tune/strategy.hpp"

namespace ejk::tuning {

namespace {

// Simulated annealing on log-time. Moves change one parameter to an adjacent value; worse
// moves are accepted with probability exp(-delta / T), T falling geometrically over the
// budget. Revisiting an evaluated config costs nothing; when proposals keep landing on
// evaluated configs, the walk restarts at the best config's nearest unevaluated neighbour.
// The next proposal is not known before the draw, but it is a neighbour of the move's start or
// its end: those are planned, so their programs build while this move is measured.
class Anneal final : public SearchStrategy {
 public:
  void run(Session& s, const Candidates& c, Rng& rng, const Lookahead& lookahead) const override {
    const double t_start = 0.3, t_end = 0.005;
    const std::size_t horizon = std::max<std::size_t>(1, s.limit());
    const std::size_t patience = 4 * std::max<std::size_t>(1, c.axes()) + 4;

    std::optional<std::size_t> cur = s.best();
    if (!cur) {
      if (s.finished()) return;
      cur = random_unevaluated(s, c.size(), rng);
      if (!cur) return;
      s.evaluate(*cur);
    }
    double ycur = s.value(*cur);
    std::size_t stall = 0;
    while (!s.finished()) {
      double progress = std::min(1.0, static_cast<double>(s.count()) / static_cast<double>(horizon));
      double temp = t_start * std::pow(t_end / t_start, progress);
      std::optional<std::size_t> next;
      if (stall < patience) next = c.neighbour(*cur, rng);
      if (!next || stall >= patience) {
        std::size_t from = s.best().value_or(*cur);
        next = nearest_unevaluated(s, c, from, rng);
        if (!next) return;
        cur = from;
        ycur = s.value(from);
        stall = 0;
      }
      double y;
      if (s.evaluated(*next)) {
        y = s.value(*next);
        ++stall;
      } else {
        if (lookahead) {
          std::vector<std::size_t> ahead = c.neighbours(*next);
          for (std::size_t j : c.neighbours(*cur))
            if (std::find(ahead.begin(), ahead.end(), j) == ahead.end()) ahead.push_back(j);
          std::erase(ahead, *next);
          plan(s, c, ahead, lookahead);
        }
        y = s.evaluate(*next);
        stall = 0;
      }
      bool accept = y <= ycur || (std::isfinite(y) && std::isfinite(ycur) && rng.unit() < std::exp(-(y - ycur) / temp));
      if (!std::isfinite(ycur) && std::isfinite(y)) accept = true;
      if (accept) {
        cur = next;
        ycur = y;
      }
    }
  }
};

}  // namespace

const SearchStrategy& anneal_strategy() {
  static const Anneal s;
  return s;
}

}  // namespace ejk::tuning
