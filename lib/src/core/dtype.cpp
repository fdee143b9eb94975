#include "ejk/dtype.hpp"

#include <bit>
#include <cmath>

#include "ejk/error.hpp"

namespace ejk {

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
  }
  return 0;
}

std::string_view to_string(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::i32})
    if (to_string(t) == name) return t;
  throw InvalidArgument("unknown dtype '" + std::string(name) + "' (expected f32, f16, bf16 or i32)");
}

bool is_float(DType t) { return t != DType::i32; }

std::uint16_t f32_to_f16(float x) {
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

float f16_to_f32(std::uint16_t h) {
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

std::uint16_t f32_to_bf16(float x) {
  std::uint32_t f = std::bit_cast<std::uint32_t>(x);
  if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((f >> 16) | 0x40u);
  f += 0x7fffu + ((f >> 16) & 1u);
  return static_cast<std::uint16_t>(f >> 16);
}

float bf16_to_f32(std::uint16_t h) { return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16); }

std::vector<std::byte> encode(DType t, std::span<const double> values) {
  std::vector<std::byte> out(values.size() * dtype_size(t));
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::byte* p = out.data() + i * dtype_size(t);
    switch (t) {
      case DType::f32: {
        float v = static_cast<float>(values[i]);
        std::memcpy(p, &v, 4);
        break;
      }
      case DType::f16: {
        std::uint16_t v = f32_to_f16(static_cast<float>(values[i]));
        std::memcpy(p, &v, 2);
        break;
      }
      case DType::bf16: {
        std::uint16_t v = f32_to_bf16(static_cast<float>(values[i]));
        std::memcpy(p, &v, 2);
        break;
      }
      case DType::i32: {
        auto v = static_cast<std::int32_t>(values[i]);
        std::memcpy(p, &v, 4);
        break;
      }
    }
  }
  return out;
}

std::vector<double> decode(DType t, std::span<const std::byte> bytes) {
  const std::size_t n = bytes.size() / dtype_size(t);
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::byte* p = bytes.data() + i * dtype_size(t);
    switch (t) {
      case DType::f32: {
        float v;
        std::memcpy(&v, p, 4);
        out[i] = v;
        break;
      }
      case DType::f16: {
        std::uint16_t v;
        std::memcpy(&v, p, 2);
        out[i] = f16_to_f32(v);
        break;
      }
      case DType::bf16: {
        std::uint16_t v;
        std::memcpy(&v, p, 2);
        out[i] = bf16_to_f32(v);
        break;
      }
      case DType::i32: {
        std::int32_t v;
        std::memcpy(&v, p, 4);
        out[i] = v;
        break;
      }
    }
  }
  return out;
}

double round_to(DType t, double x) {
  switch (t) {
    case DType::f32: return static_cast<float>(x);
    case DType::f16: return f16_to_f32(f32_to_f16(static_cast<float>(x)));
    case DType::bf16: return bf16_to_f32(f32_to_bf16(static_cast<float>(x)));
    case DType::i32: return static_cast<double>(static_cast<std::int32_t>(x));
  }
  return x;
}

double default_tolerance(DType t) {
  switch (t) {
    case DType::f32: return 1e-5;
    case DType::f16: return 2e-3;
    case DType::bf16: return 1e-2;
    case DType::i32: return 0.0;
  }
  return 0.0;
}

}  // namespace ejk
