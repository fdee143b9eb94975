#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ejk/export.hpp"

namespace ejk {

using Shape = std::vector<std::int64_t>;

// Bounds every shape keeps, checked wherever sizes enter: tensors, kernel validation (so every
// invocation, from the API, a recipe or a trace), recipes and traces. Device code takes
// dimensions as 32-bit ints, hence one dimension below 2^31. The product of a shape's
// dimensions (a zero counted as one, so every partial product is covered) stays at or below
// 2^40, so element counts, byte counts and offsets within a tensor (at most 2^43 bytes) never
// overflow 64-bit arithmetic. Kernels whose device code indexes a whole tensor with 32-bit
// integers refuse larger tensors in their own validation.
inline constexpr std::size_t max_rank = 8;
inline constexpr std::int64_t max_dim = 2147483647;  // 2^31 - 1
inline constexpr std::int64_t max_elements = std::int64_t{1} << 40;

// The shape's element count. Throws InvalidArgument "WHAT [shape]: why" when the shape breaks a
// bound above (a negative dimension included), so callers name what the shape belongs to.
EJK_API std::int64_t numel(const Shape& s, std::string_view what = "shape");
EJK_API std::string to_string(const Shape& s);  // "[2, 3, 4]"

}  // namespace ejk
