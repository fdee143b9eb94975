#pragma once
// One element's storage bytes from a value, and its value from them: what encode and decode do
// for each element, and every other host conversion (typed transfers, fills) with them.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ejk/dtype.hpp"

namespace ejk {

inline void store_element(DType t, double x, std::byte* dst) {
  switch (t) {
    case DType::f32: {
      const float v = static_cast<float>(x);
      std::memcpy(dst, &v, 4);
      return;
    }
    case DType::f16:
    case DType::bf16: {
      const float f = static_cast<float>(x);
      const std::uint16_t v = t == DType::f16 ? f32_to_f16(f) : f32_to_bf16(f);
      std::memcpy(dst, &v, 2);
      return;
    }
    case DType::i32: {
      const std::int32_t v = to_i32(x);
      std::memcpy(dst, &v, 4);
      return;
    }
  }
}

inline double load_element(DType t, const std::byte* src) {
  switch (t) {
    case DType::f32: {
      float v;
      std::memcpy(&v, src, 4);
      return v;
    }
    case DType::f16:
    case DType::bf16: {
      std::uint16_t v;
      std::memcpy(&v, src, 2);
      return t == DType::f16 ? f16_to_f32(v) : bf16_to_f32(v);
    }
    case DType::i32: {
      std::int32_t v;
      std::memcpy(&v, src, 4);
      return v;
    }
  }
  return 0;
}

}  // namespace ejk
