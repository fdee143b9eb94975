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
        const std::int32_t v = to_i32(values[i]);
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
    case DType::i32: return static_cast<double>(to_i32(x));
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
