#pragma once
// Element types. f16 and bf16 are storage types: kernels accumulate in f32.
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ejk/export.hpp"

namespace ejk {

enum class DType : std::uint8_t { f32, f16, bf16, i32 };

EJK_API std::size_t dtype_size(DType t);
EJK_API std::string_view to_string(DType t);
EJK_API DType parse_dtype(std::string_view name);  // throws InvalidArgument listing the valid names
EJK_API bool is_float(DType t);

// Round-to-nearest-even conversions between f32 and the 16-bit storage formats; inline, since
// host loops over millions of elements (ring attention's sums, tensor transfers) call them.
inline std::uint16_t f32_to_f16(float x) {
  const std::uint32_t f = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t sign = (f >> 16) & 0x8000u;
  const std::uint32_t abs = f & 0x7fffffffu;
  if (abs >= 0x7f800000u)  // inf or nan
    return static_cast<std::uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {                                                     // subnormal or zero
    // Adding 0.5 makes the FPU do the round-to-nearest-even shift into the subnormal range.
    const float magic = std::bit_cast<float>(0x3f000000u);
    const float r = std::bit_cast<float>(abs) + magic;
    return static_cast<std::uint16_t>(sign | (std::bit_cast<std::uint32_t>(r) - 0x3f000000u));
  }
  std::uint32_t mant_odd = (abs >> 13) & 1u;
  std::uint32_t v = abs + 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round
  return static_cast<std::uint16_t>(sign | (v >> 13));
}

inline float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return std::bit_cast<float>(std::bit_cast<std::uint32_t>(v) | sign);
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

inline std::uint16_t f32_to_bf16(float x) {
  std::uint32_t f = std::bit_cast<std::uint32_t>(x);
  if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((f >> 16) | 0x40u);
  f += 0x7fffu + ((f >> 16) & 1u);
  return static_cast<std::uint16_t>(f >> 16);
}

inline float bf16_to_f32(std::uint16_t h) { return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16); }

// A value stored in an i32 tensor: truncated toward zero, as C++ converts, but saturated to
// int32's range and NaN to 0, where a plain conversion would be undefined.
inline std::int32_t to_i32(double x) {
  if (std::isnan(x)) return 0;
  if (x >= 2147483647.0) return 2147483647;
  if (x <= -2147483648.0) return -2147483647 - 1;
  return static_cast<std::int32_t>(x);
}

// Host-side encode/decode between doubles and a dtype's storage bytes.
EJK_API std::vector<std::byte> encode(DType t, std::span<const double> values);
EJK_API std::vector<double> decode(DType t, std::span<const std::byte> bytes);

// The value a dtype stores for x (used by references so they see the same rounded inputs).
EJK_API double round_to(DType t, double x);

// Relative tolerance a kernel result of this dtype is checked with.
EJK_API double default_tolerance(DType t);

}  // namespace ejk
