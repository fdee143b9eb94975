#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "tune/search.hpp"

namespace ejk::tuning {

Candidates::Candidates(std::vector<Config> configs) : configs_(std::move(configs)) {
  std::map<std::string, std::size_t, std::less<>> axis_of;
  for (const auto& c : configs_)
    for (const auto& [name, v] : c.values()) {
      auto [it, fresh] = axis_of.try_emplace(name, axes_.size());
      if (fresh) axes_.push_back({name, {}, true});
      Axis& a = axes_[it->second];
      if (std::find(a.values.begin(), a.values.end(), v) == a.values.end()) a.values.push_back(v);
      if (!std::holds_alternative<std::int64_t>(v)) a.ordinal = false;
    }
  for (auto& a : axes_)
    if (a.ordinal)
      std::sort(a.values.begin(), a.values.end(),
                [](const Value& x, const Value& y) { return std::get<std::int64_t>(x) < std::get<std::int64_t>(y); });
  by_.resize(axes_.size());
  for (std::size_t a = 0; a < axes_.size(); ++a) by_[a].resize(axes_[a].values.size());
  pos_.resize(configs_.size());
  for (std::size_t i = 0; i < configs_.size(); ++i) {
    pos_[i].assign(axes_.size(), -1);
    for (std::size_t a = 0; a < axes_.size(); ++a) {
      auto it = configs_[i].values().find(axes_[a].name);
      if (it == configs_[i].values().end()) continue;
      auto p = std::find(axes_[a].values.begin(), axes_[a].values.end(), it->second) - axes_[a].values.begin();
      pos_[i][a] = static_cast<int>(p);
      by_[a][static_cast<std::size_t>(p)].push_back(i);
    }
    index_.emplace(configs_[i].canonical(), i);
  }
}

std::optional<std::size_t> Candidates::find(const Config& c) const {
  auto it = index_.find(c.canonical());
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

double Candidates::distance(std::size_t a, std::size_t b) const {
  if (axes_.empty()) return 0;
  double d = 0;
  for (std::size_t x = 0; x < axes_.size(); ++x) {
    int pa = pos_[a][x], pb = pos_[b][x];
    if (pa == pb) continue;
    if (pa < 0 || pb < 0 || !axes_[x].ordinal) {
      d += 1;
    } else {
      d += std::abs(pa - pb) / static_cast<double>(axes_[x].values.size() - 1);
    }
  }
  return d / static_cast<double>(axes_.size());
}

std::optional<std::size_t> Candidates::neighbour(std::size_t i, Rng& rng) const {
  std::vector<std::size_t> movable;
  for (std::size_t a = 0; a < axes_.size(); ++a)
    if (pos_[i][a] >= 0 && axes_[a].values.size() > 1) movable.push_back(a);
  if (movable.empty()) return std::nullopt;
  std::size_t a = movable[rng.below(movable.size())];
  int len = static_cast<int>(axes_[a].values.size());
  int p = pos_[i][a], q;
  if (axes_[a].ordinal) {
    q = rng.below(2) ? p + 1 : p - 1;
    if (q < 0 || q >= len) q = 2 * p - q;  // at an end: step the other way
  } else {
    // Text values have no order: any other value is adjacent.
    q = static_cast<int>(rng.below(static_cast<std::uint64_t>(len - 1)));
    if (q >= p) ++q;
  }
  const std::vector<std::size_t> ties = nearest(i, by_[a][static_cast<std::size_t>(q)]);
  if (ties.empty()) return std::nullopt;
  return ties[rng.below(ties.size())];
}

std::vector<std::size_t> Candidates::nearest(std::size_t i, const std::vector<std::size_t>& pool) const {
  double best = std::numeric_limits<double>::infinity();
  std::vector<std::size_t> ties;
  for (std::size_t j : pool) {
    double d = distance(i, j);
    if (d < best - 1e-12) {
      best = d;
      ties.assign(1, j);
    } else if (d < best + 1e-12) {
      ties.push_back(j);
    }
  }
  return ties;
}

std::vector<std::size_t> Candidates::neighbours(std::size_t i) const {
  std::vector<std::size_t> out;
  for (std::size_t a = 0; a < axes_.size(); ++a) {
    const int p = pos_[i][a], len = static_cast<int>(axes_[a].values.size());
    if (p < 0 || len < 2) continue;
    for (int q = 0; q < len; ++q) {
      if (axes_[a].ordinal ? std::abs(q - p) != 1 : q == p) continue;
      for (std::size_t j : nearest(i, by_[a][static_cast<std::size_t>(q)]))
        if (std::find(out.begin(), out.end(), j) == out.end()) out.push_back(j);
    }
  }
  return out;
}

std::size_t evaluation_limit(const Budget& budget, Strategy strategy, std::size_t n) {
  if (budget.evaluations > 0) return std::min<std::size_t>(static_cast<std::size_t>(budget.evaluations), n);
  if (budget.seconds > 0 || budget.target_ns > 0) return n;
  if (strategy == Strategy::exhaustive) return n;
  return std::min<std::size_t>(n, std::max<std::size_t>(8, (n * 3 + 9) / 10));
}

}  // namespace ejk::tuning
