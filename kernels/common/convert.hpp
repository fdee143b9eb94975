#pragma once
// CPU implementations' storage codecs for runs of elements: f32, f16 and bf16 arrays widened
// into f32 scratch and narrowed back (round to nearest even, NaN kept quiet), so that the
// arithmetic between is one vectorised f32 loop. f16 goes through F16C where the processor has it.
#include <cstdint>

#include "ejk/dtype.hpp"

namespace ejk::kernels {

// dst[0..n) = elements i..i+n of the storage array `base` of dtype t.
void widen(const void* base, DType t, std::int64_t i, std::int64_t n, float* dst);
// Elements i..i+n of the storage array `base` of dtype t = src[0..n), rounded.
void narrow(const float* src, std::int64_t n, void* base, DType t, std::int64_t i);

}  // namespace ejk::kernels
