#pragma once
// What every search strategy shares: the session (budget bookkeeping, evaluations, the best so
// far) and the helpers strategies pick candidates with.
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "tune/search.hpp"

namespace ejk::tuning {

// Budget bookkeeping shared by every strategy.
class Session {
 public:
  Session(const Candidates& cands, Strategy strategy, const Budget& budget, const Evaluate& evaluate,
          const Progress& progress)
      : cands_(cands),
        budget_(budget),
        evaluate_(evaluate),
        progress_(progress),
        limit_(evaluation_limit(budget, strategy, cands.size())),
        value_(cands.size(), std::numeric_limits<double>::infinity()),
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
    double v = std::numeric_limits<double>::infinity();
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

// The unevaluated candidates among the first n, in order.
std::vector<std::size_t> unevaluated(const Session& s, std::size_t n);
// One of them at random; nullopt when none is left.
std::optional<std::size_t> random_unevaluated(const Session& s, std::size_t n, Rng& rng);
// The unevaluated candidate nearest to `from` (random among equals).
std::optional<std::size_t> nearest_unevaluated(const Session& s, const Candidates& c, std::size_t from, Rng& rng);
// Hands the lookahead the unevaluated candidates of `order` the budget can still reach.
void plan(const Session& s, const Candidates& c, const std::vector<std::size_t>& order, const Lookahead& lookahead);
// Plans `order`, then evaluates its unevaluated candidates in turn until the session stops.
void evaluate_in_order(Session& s, const Candidates& c, const std::vector<std::size_t>& order, const Lookahead& lookahead);

}  // namespace ejk::tuning
