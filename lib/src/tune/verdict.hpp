#pragma once
// Which measured config a tune stores.
#include "ejk/tuner.hpp"

namespace ejk::tuning {

// Noise is not a win: the best candidate displaces the heuristic's config only when the paired
// re-run puts it at least this far ahead; otherwise the heuristic's config is stored with its
// re-run measurement, so a tuned cache or a shipped bundle never carries a tie as a "win".
constexpr double displace_margin = 0.02;

// "Near the best": within this fraction of the best measured time (TuneResult's
// evaluations_to_near_best).
constexpr double near_best = 0.05;

// 1-based position in `measured` of the first ok measurement within near_best of the fastest;
// 0 when none is ok.
std::size_t evaluations_to_near_best(const std::vector<Measurement>& measured);

// The share of the tune's gain over the heuristic (heuristic time - best time) that the warm
// start alone gave, in [0, 1]; nullopt without a gain or without both measurements.
std::optional<double> warm_share(const TuneResult& out);

// `best` (the paired re-run's winner, out.speedup its lead over the heuristic), or the
// heuristic's re-run measurement in out.rerank where that lead is under displace_margin; `kept`
// says which. Without a paired lead there is nothing to judge by: `best` stands.
const Measurement* keep_heuristic_unless_ahead(const TuneResult& out, const Measurement* best, bool paired, bool& kept);

}  // namespace ejk::tuning
