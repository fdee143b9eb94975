#include "tune/search.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <variant>

#include "ejk/error.hpp"

namespace ejk::tuning {

namespace {
constexpr double inf = std::numeric_limits<double>::infinity();
}

// ---------------------------------------------------------------------------------------------
// Candidates

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
  double best = inf;
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

// ---------------------------------------------------------------------------------------------
// Session: budget bookkeeping shared by every strategy

namespace {

class Session {
 public:
  Session(const Candidates& cands, Strategy strategy, const Budget& budget, const Evaluate& evaluate,
          const Progress& progress)
      : cands_(cands),
        budget_(budget),
        evaluate_(evaluate),
        progress_(progress),
        limit_(evaluation_limit(budget, strategy, cands.size())),
        value_(cands.size(), inf),
        done_(cands.size(), false),
        t0_(std::chrono::steady_clock::now()) {
    result.space_size = cands.size();
  }

  // True when the search must stop; records why.
  bool finished() {
    if (!result.stopped.empty()) return true;
    if (result.evaluated.size() + excluded_ >= cands_.size()) result.stopped = "space exhausted";
    else if (result.evaluated.size() >= limit_) result.stopped = "budget: evaluations";
    else if (budget_.seconds > 0 && elapsed() >= budget_.seconds) result.stopped = "budget: seconds";
    else if (budget_.target_ns > 0 && best_ns_ > 0 && best_ns_ <= budget_.target_ns * (1 + budget_.target_within))
      result.stopped = "target";
    return !result.stopped.empty();
  }

  // True for candidates measured or excluded: strategies take neither again.
  bool evaluated(std::size_t i) const { return done_[i]; }
  // Takes an unevaluated candidate out of the search without measuring it (value +inf).
  void exclude(std::size_t i) {
    if (done_[i]) return;
    done_[i] = true;
    ++excluded_;
  }
  // log(median ns) of an evaluated candidate; +inf for failures.
  double value(std::size_t i) const { return value_[i]; }
  std::size_t count() const { return result.evaluated.size(); }
  std::size_t limit() const { return limit_; }
  std::optional<std::size_t> best() const { return best_; }
  const std::vector<std::size_t>& order() const { return order_; }

  double evaluate(std::size_t i) {
    Measurement m = evaluate_(cands_.at(i), best_ns_);
    m.config = cands_.at(i);
    done_[i] = true;
    order_.push_back(i);
    double v = inf;
    if (m.status == Status::ok && m.stats.n > 0 && m.stats.median_ns > 0) {
      v = std::log(m.stats.median_ns);
      if (best_ns_ == 0 || m.stats.median_ns < best_ns_) {
        best_ns_ = m.stats.median_ns;
        best_ = i;
        result.best = result.evaluated.size();
      }
    }
    value_[i] = v;
    result.evaluated.push_back(std::move(m));
    if (progress_) progress_(result.evaluated.back(), result.evaluated.size(), cands_.size());
    return v;
  }

  SearchResult result;

 private:
  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

  const Candidates& cands_;
  Budget budget_;
  const Evaluate& evaluate_;
  const Progress& progress_;
  std::size_t limit_;
  std::vector<double> value_;
  std::vector<bool> done_;
  std::vector<std::size_t> order_;
  std::size_t excluded_ = 0;
  double best_ns_ = 0;
  std::optional<std::size_t> best_;
  std::chrono::steady_clock::time_point t0_;
};

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

// Hands the lookahead the unevaluated candidates of `order` the budget can still reach.
void plan(const Session& s, const Candidates& c, const std::vector<std::size_t>& order, const Lookahead& lookahead) {
  if (!lookahead) return;
  std::vector<Config> next;
  for (std::size_t i : order) {
    if (s.count() + next.size() >= s.limit()) break;
    if (!s.evaluated(i)) next.push_back(c.at(i));
  }
  lookahead(next);
}

void exhaustive(Session& s, const Candidates& c, const Lookahead& lookahead) {
  std::vector<std::size_t> order(c.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  plan(s, c, order, lookahead);
  for (std::size_t i = 0; i < c.size() && !s.finished(); ++i)
    if (!s.evaluated(i)) s.evaluate(i);
}

void random_search(Session& s, const Candidates& c, Rng& rng, const Lookahead& lookahead) {
  std::vector<std::size_t> order(c.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
  plan(s, c, order, lookahead);
  for (std::size_t i : order) {
    if (s.finished()) return;
    if (!s.evaluated(i)) s.evaluate(i);
  }
}

// The unevaluated candidate nearest to `from` (random among equals).
std::optional<std::size_t> nearest_unevaluated(const Session& s, const Candidates& c, std::size_t from, Rng& rng) {
  double best = inf;
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

// Simulated annealing on log-time. Moves change one parameter to an adjacent value; worse
// moves are accepted with probability exp(-delta / T), T falling geometrically over the
// budget. Revisiting an evaluated config costs nothing; when proposals keep landing on
// evaluated configs, the walk restarts at the best config's nearest unevaluated neighbour.
// The next proposal is not known before the draw, but it is a neighbour of the move's start or
// its end: those are planned, so their programs build while this move is measured.
void anneal(Session& s, const Candidates& c, Rng& rng, const Lookahead& lookahead) {
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

// ---------------------------------------------------------------------------------------------
// Model-based: a Gaussian-process surrogate of log-time over the candidates' parameter
// positions (kernel exp(-distance / length), length chosen by marginal likelihood), choosing
// the candidate with the largest expected improvement.

// Cholesky factor of a symmetric positive-definite n x n matrix (row-major, in place, lower).
bool cholesky(std::vector<double>& a, std::size_t n) {
  for (std::size_t j = 0; j < n; ++j) {
    double d = a[j * n + j];
    for (std::size_t k = 0; k < j; ++k) d -= a[j * n + k] * a[j * n + k];
    if (d <= 0) return false;
    d = std::sqrt(d);
    a[j * n + j] = d;
    for (std::size_t i = j + 1; i < n; ++i) {
      double v = a[i * n + j];
      for (std::size_t k = 0; k < j; ++k) v -= a[i * n + k] * a[j * n + k];
      a[i * n + j] = v / d;
    }
  }
  return true;
}

// Solves L x = b in place.
void forward(const std::vector<double>& l, std::size_t n, std::vector<double>& b) {
  for (std::size_t i = 0; i < n; ++i) {
    double v = b[i];
    for (std::size_t k = 0; k < i; ++k) v -= l[i * n + k] * b[k];
    b[i] = v / l[i * n + i];
  }
}

// Solves L^T x = b in place.
void backward(const std::vector<double>& l, std::size_t n, std::vector<double>& b) {
  for (std::size_t ii = n; ii-- > 0;) {
    double v = b[ii];
    for (std::size_t k = ii + 1; k < n; ++k) v -= l[k * n + ii] * b[k];
    b[ii] = v / l[ii * n + ii];
  }
}

double normal_pdf(double z) { return std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI); }
double normal_cdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

// Builds ahead: the random start's draws, then after each pick the candidates ranked next by
// expected improvement.
void model(Session& s, const Candidates& c, Rng& rng, const Lookahead& lookahead) {
  const std::size_t n_cands = c.size();
  const std::size_t initial = std::clamp<std::size_t>(c.axes() + 1, 4, 10);
  const double noise = 1e-2;
  const double lengths[] = {0.02, 0.05, 0.1, 0.2, 0.5};
  // Candidates scored per step: all of them up to this many, else a random sample plus the
  // nearest unevaluated configs of the best so far.
  const std::size_t max_scored = 4000;
  std::vector<std::size_t> draws;

  while (!s.finished()) {
    const auto& obs = s.order();
    std::vector<std::size_t> ok;
    double worst = -inf;
    for (std::size_t i : obs)
      if (std::isfinite(s.value(i))) {
        ok.push_back(i);
        worst = std::max(worst, s.value(i));
      }
    if (obs.size() < initial || ok.size() < 2) {
      if (draws.empty()) {
        // The rest of the random start at once: the same draws as one at a time, since
        // evaluating draws nothing.
        std::vector<std::size_t> free = unevaluated(s, n_cands);
        for (std::size_t k = obs.size() < initial ? initial - obs.size() : 1; k > 0 && !free.empty(); --k) {
          const auto at = static_cast<std::ptrdiff_t>(rng.below(free.size()));
          draws.push_back(free[static_cast<std::size_t>(at)]);
          free.erase(free.begin() + at);
        }
        plan(s, c, draws, lookahead);
      }
      if (draws.empty()) return;
      const std::size_t next = draws.front();
      draws.erase(draws.begin());
      s.evaluate(next);
      continue;
    }
    // Failures count as clearly worse than anything seen, so the model steers away from them.
    const std::size_t n = obs.size();
    std::vector<double> y(n);
    for (std::size_t i = 0; i < n; ++i) y[i] = std::isfinite(s.value(obs[i])) ? s.value(obs[i]) : worst + 1.0;
    double mean = std::accumulate(y.begin(), y.end(), 0.0) / static_cast<double>(n);
    double var = 0;
    for (double v : y) var += (v - mean) * (v - mean);
    double sd = std::sqrt(var / static_cast<double>(n));
    if (sd < 1e-9) sd = 1;
    for (auto& v : y) v = (v - mean) / sd;

    std::vector<double> dist(n * n);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j) dist[i * n + j] = c.distance(obs[i], obs[j]);

    double best_ll = -inf, length = lengths[2];
    std::vector<double> chol, alpha;
    for (double len : lengths) {
      std::vector<double> k(n * n);
      for (std::size_t i = 0; i < n * n; ++i) k[i] = std::exp(-dist[i] / len);
      for (std::size_t i = 0; i < n; ++i) k[i * n + i] += noise;
      if (!cholesky(k, n)) continue;
      std::vector<double> a = y;
      forward(k, n, a);
      backward(k, n, a);
      double ll = 0;
      for (std::size_t i = 0; i < n; ++i) ll += -0.5 * y[i] * a[i] - std::log(k[i * n + i]);
      if (ll > best_ll) {
        best_ll = ll;
        length = len;
        chol = std::move(k);
        alpha = std::move(a);
      }
    }
    if (chol.empty()) {
      auto next = random_unevaluated(s, n_cands, rng);
      if (!next) return;
      s.evaluate(*next);
      continue;
    }
    double y_best = inf;
    for (std::size_t i = 0; i < n; ++i)
      if (std::isfinite(s.value(obs[i]))) y_best = std::min(y_best, y[i]);

    std::vector<std::size_t> pool = unevaluated(s, n_cands);
    if (pool.empty()) return;
    if (pool.size() > max_scored) {
      for (std::size_t i = 0; i < max_scored; ++i) std::swap(pool[i], pool[i + rng.below(pool.size() - i)]);
      pool.resize(max_scored);
      for (int k = 0; k < 8 && s.best(); ++k)
        if (auto nb = c.neighbour(*s.best(), rng); nb && !s.evaluated(*nb)) pool.push_back(*nb);
    }
    double best_ei = -1;
    std::size_t pick = pool.front();
    std::vector<double> ks(n);
    std::vector<std::pair<double, std::size_t>> ranked;
    for (std::size_t j : pool) {
      for (std::size_t i = 0; i < n; ++i) ks[i] = std::exp(-c.distance(j, obs[i]) / length);
      double mu = std::inner_product(ks.begin(), ks.end(), alpha.begin(), 0.0);
      forward(chol, n, ks);
      double v = 1.0 - std::inner_product(ks.begin(), ks.end(), ks.begin(), 0.0);
      double sigma = std::sqrt(std::max(v, 1e-12));
      double gain = y_best - mu - 0.01;
      double z = gain / sigma;
      double ei = gain * normal_cdf(z) + sigma * normal_pdf(z);
      if (lookahead) ranked.emplace_back(-ei, j);
      if (ei > best_ei) {
        best_ei = ei;
        pick = j;
      }
    }
    if (lookahead) {
      std::stable_sort(ranked.begin(), ranked.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
      std::vector<std::size_t> ahead;
      for (const auto& [ei, j] : ranked)
        if (j != pick && ahead.size() < 8) ahead.push_back(j);
      plan(s, c, ahead, lookahead);
    }
    s.evaluate(pick);
  }
}

// Measures each variant's best guess, then excludes the variants whose guess is far behind
// the best one (Budget::race_ratio).
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
  double best = inf;
  for (const auto& [variant, members] : by_variant) {
    double b = inf;
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
  switch (strategy) {
    case Strategy::exhaustive: exhaustive(s, cands, lookahead); break;
    case Strategy::random: random_search(s, cands, rng, lookahead); break;
    case Strategy::anneal: anneal(s, cands, rng, lookahead); break;
    case Strategy::model: model(s, cands, rng, lookahead); break;
  }
  s.finished();
  return std::move(s.result);
}

}  // namespace ejk::tuning
