#pragma once
// The element rule of Device::difference, shared by its host implementation and the tuning
// bench's comparison with a host reference; kernels/common/difference.cl and .comp repeat it.
#include <cstddef>
#include <cstdint>
#include <span>

#include "ejk/device.hpp"

namespace ejk {

// Elements [0, n) of raw storage `got` against `want_raw` (same dtype) or `want_host`; both
// null: only finiteness is checked. `bad` counts from 0.
Difference compare_elements(DType t, const std::byte* got, const std::byte* want_raw, const double* want_host, std::int64_t n);

// Folds `part`, which covers elements from `first` on, into `total`.
void merge(Difference& total, const Difference& part, std::int64_t first);

// Elements [0, n) of `got` against `want_raw` (a buffer of the same dtype) or `want_host`, or
// neither, read back a slice at a time and compared on every core: host memory stays bounded
// whatever the arrays' size.
Difference difference_in_slices(Device& device, const Buffer& got, const Buffer* want_raw, const double* want_host, DType t,
                                std::int64_t n);

// The result of a device reduction (difference.cl, .comp): four words a group, (err bits,
// scale bits, bad low, bad high), a bad index of n or more meaning none.
Difference fold_groups(std::span<const std::uint32_t> words, std::int64_t n);

}  // namespace ejk
