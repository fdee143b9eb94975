#include "tune/session.hpp"

namespace ejk::tuning {

std::vector<std::size_t> unevaluated(const Session& s, std::size_t n) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < n; ++i)
    if (!s.evaluated(i)) out.push_back(i);
  return out;
}

std::optional<std::size_t> random_unevaluated(const Session& s, std::size_t n, Rng& rng) {
  auto free = unevaluated(s, n);
  if (free.empty()) return std::nullopt;
  return free[rng.below(free.size())];
}

std::optional<std::size_t> nearest_unevaluated(const Session& s, const Candidates& c, std::size_t from, Rng& rng) {
  double best = std::numeric_limits<double>::infinity();
  std::vector<std::size_t> ties;
  for (std::size_t j = 0; j < c.size(); ++j) {
    if (s.evaluated(j)) continue;
    double d = c.distance(from, j);
    if (d < best - 1e-12) {
      best = d;
      ties.assign(1, j);
    } else if (d < best + 1e-12) {
      ties.push_back(j);
    }
  }
  if (ties.empty()) return std::nullopt;
  return ties[rng.below(ties.size())];
}

void plan(const Session& s, const Candidates& c, const std::vector<std::size_t>& order, const Lookahead& lookahead) {
  if (!lookahead) return;
  std::vector<Config> next;
  for (std::size_t i : order) {
    if (s.count() + next.size() >= s.limit()) break;
    if (!s.evaluated(i)) next.push_back(c.at(i));
  }
  lookahead(next);
}

void evaluate_in_order(Session& s, const Candidates& c, const std::vector<std::size_t>& order, const Lookahead& lookahead) {
  plan(s, c, order, lookahead);
  for (std::size_t i : order) {
    if (s.finished()) return;
    if (!s.evaluated(i)) s.evaluate(i);
  }
}

}  // namespace ejk::tuning
