#pragma once
// The element rule of Device::difference, shared by its host implementation and the tuning
// bench's comparison with a host reference; kernels/common/difference.cl and .comp repeat it.
#include <cstddef>
#include <cstdint>

#include "ejk/device.hpp"

namespace ejk {

// Elements [0, n) of raw storage `got` against `want_raw` (same dtype) or `want_host`; both
// null: only finiteness is checked. `bad` counts from 0.
Difference compare_elements(DType t, const std::byte* got, const std::byte* want_raw, const double* want_host, std::int64_t n);

// Folds `part`, which covers elements from `first` on, into `total`.
void merge(Difference& total, const Difference& part, std::int64_t first);

}  // namespace ejk
