#pragma once
// Summaries of timing samples.
#include <span>
#include <vector>

#include "ejk/measurement.hpp"

namespace ejk::tuning {

// Median, interquartile range (linear-interpolated quartiles), minimum and count.
Stats summarize(std::span<const double> samples_ns);

// IQR / median: the relative spread sampling tries to bring down.
double spread(const Stats& s);

double median(std::vector<double> values);

}  // namespace ejk::tuning
