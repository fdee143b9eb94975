#include "ejk/dtype.hpp"

#include <bit>
#include <cmath>

#include "core/element.hpp"
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
  const std::size_t size = dtype_size(t);
  std::vector<std::byte> out(values.size() * size);
  for (std::size_t i = 0; i < values.size(); ++i) store_element(t, values[i], out.data() + i * size);
  return out;
}

std::vector<double> decode(DType t, std::span<const std::byte> bytes) {
  const std::size_t size = dtype_size(t), n = bytes.size() / size;
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = load_element(t, bytes.data() + i * size);
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
