#pragma once
// Element types. f16 and bf16 are storage types: kernels accumulate in f32.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ejk {

enum class DType : std::uint8_t { f32, f16, bf16, i32 };

std::size_t dtype_size(DType t);
std::string_view to_string(DType t);
DType parse_dtype(std::string_view name);  // throws InvalidArgument listing the valid names
bool is_float(DType t);

// Round-to-nearest-even conversions between f32 and the 16-bit storage formats.
std::uint16_t f32_to_f16(float x);
float f16_to_f32(std::uint16_t h);
std::uint16_t f32_to_bf16(float x);
float bf16_to_f32(std::uint16_t h);

// Host-side encode/decode between doubles and a dtype's storage bytes.
std::vector<std::byte> encode(DType t, std::span<const double> values);
std::vector<double> decode(DType t, std::span<const std::byte> bytes);

// The value a dtype stores for x (used by references so they see the same rounded inputs).
double round_to(DType t, double x);

// Relative tolerance a kernel result of this dtype is checked with.
double default_tolerance(DType t);

}  // namespace ejk
