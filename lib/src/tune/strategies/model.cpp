#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "tune/strategy.hpp"

namespace ejk::tuning {

namespace {

constexpr double inf = std::numeric_limits<double>::infinity();

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
class Model final : public SearchStrategy {
 public:
  void run(Session& s, const Candidates& c, Rng& rng, const Lookahead& lookahead) const override {
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
        std::stable_sort(ranked.begin(), ranked.end(), [](const auto& lhs, const auto& rhs) { return lhs.first < rhs.first; });
        std::vector<std::size_t> ahead;
        for (const auto& [ei, j] : ranked)
          if (j != pick && ahead.size() < 8) ahead.push_back(j);
        plan(s, c, ahead, lookahead);
      }
      s.evaluate(pick);
    }
  }
};

}  // namespace

const SearchStrategy& model_strategy() {
  static const Model s;
  return s;
}

}  // namespace ejk::tuning
