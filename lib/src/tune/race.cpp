#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <variant>

#include "tune/strategy.hpp"

namespace ejk::tuning {

void race(Session& s, const Candidates& c, const std::vector<std::size_t>& start, double ratio,
          const Lookahead& lookahead) {
  std::map<std::string, std::vector<std::size_t>> by_variant;
  for (std::size_t i = 0; i < c.size(); ++i) {
    const Config& cfg = c.at(i);
    if (cfg.has("variant") && std::holds_alternative<std::string>(cfg.values().at("variant")))
      by_variant[cfg.text("variant")].push_back(i);
  }
  if (by_variant.size() < 2) return;
  std::vector<std::size_t> guesses;
  for (const auto& [variant, members] : by_variant) {
    if (std::any_of(members.begin(), members.end(), [&](std::size_t i) { return s.evaluated(i); })) continue;
    std::size_t guess = members.front();
    if (!start.empty() && start.front() < c.size())
      for (std::size_t i : members)
        if (c.distance(i, start.front()) < c.distance(guess, start.front())) guess = i;
    guesses.push_back(guess);
  }
  if (lookahead && !guesses.empty()) {
    std::vector<Config> next;
    for (std::size_t i : guesses) next.push_back(c.at(i));
    lookahead(next);
  }
  for (std::size_t i : guesses) {
    if (s.finished()) return;
    s.evaluate(i);
  }
  std::map<std::string, double> best_of;
  double best = std::numeric_limits<double>::infinity();
  for (const auto& [variant, members] : by_variant) {
    double b = std::numeric_limits<double>::infinity();
    for (std::size_t i : members)
      if (s.evaluated(i)) b = std::min(b, s.value(i));
    best_of[variant] = b;
    best = std::min(best, b);
  }
  if (!std::isfinite(best)) return;
  for (const auto& [variant, members] : by_variant) {
    const double b = best_of[variant];
    // A variant whose guess failed is kept: one config failing says little about the others.
    if (!std::isfinite(b) || b <= best + std::log(ratio)) continue;
    for (std::size_t i : members) s.exclude(i);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3g", std::exp(b - best));
    s.result.raced += (s.result.raced.empty() ? "" : ", ") + std::string("variant ") + variant + " (" + buf +
                      "x the best guess, " + std::to_string(members.size()) + " candidates)";
  }
}

}  // namespace ejk::tuning
