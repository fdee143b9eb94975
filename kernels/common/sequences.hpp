#pragma once
// Packed variable-length input, which several kernels take (flash attention, mean pooling): the
// checks of its offsets, in one place.
#include <cstdint>
#include <span>

namespace ejk::kernels {

// Throws InvalidArgument naming `name` and its values when they do not start at 0, decrease
// anywhere or end other than at `total` (the token count).
void check_cu_seqlens(std::span<const std::int64_t> values, const char* name, std::int64_t total);

}  // namespace ejk::kernels
