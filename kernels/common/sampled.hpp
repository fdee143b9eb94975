#pragma once
// What the kernels' sampled references (Kernel::sampled_reference) share: reading an input a
// stretch of rows at a time, so host memory stays bounded however long the input is, and
// gathering (element, value) pairs into SampledOutputs.
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "ejk/kernel.hpp"

namespace ejk::kernels {

// Calls fn(r, row) for r = 0 .. count - 1, where row points at the `row_len` elements
// [base + r * row_len, base + (r + 1) * row_len) of argument `arg`, read a stretch of whole rows
// (about 2^20 elements) at a time.
void for_each_row(const ArgReader& read, std::size_t arg, std::int64_t base, std::int64_t row_len, std::int64_t count,
                  const std::function<void(std::int64_t, const double*)>& fn);

// Elements [offset, offset + width) of each of those rows: [count][width]. Tokens of one head
// of a [tokens][heads][dim] argument, say.
std::vector<double> row_slices(const ArgReader& read, std::size_t arg, std::int64_t base, std::int64_t row_len,
                               std::int64_t count, std::int64_t offset, std::int64_t width);

// Reads of arrays held on the host, as an ArgReader: so a full reference can share a sampled
// one's reading code.
ArgReader host_reader(const HostArrays& args);

// (element, value) pairs per output argument as SampledOutputs: indices sorted, empty ones left out.
using SampledPairs = std::vector<std::pair<std::int64_t, double>>;
std::vector<SampledOutput> sampled_outputs(std::vector<std::pair<std::size_t, SampledPairs>> outs);

}  // namespace ejk::kernels
