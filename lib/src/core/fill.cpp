#include <algorithm>
#include <cmath>
#include <vector>

#include "core/element.hpp"
#include "core/fill.hpp"
#include "core/parts.hpp"
#include "ejk/error.hpp"
#include "ejk/device.hpp"
#include "ejk/tensor.hpp"
#include "common/philox.h"

namespace ejk {

namespace {

constexpr std::uint32_t fill_tag = 0x66696c6cu;  // "fill": apart from dropout's counters

// Elements [first, first + n) of a fill into `out` (storage bytes of dtype t).
void generate(DType t, std::uint64_t seed, float lo, float hi, std::int64_t first, std::int64_t n, std::byte* out) {
  const auto k0 = static_cast<std::uint32_t>(seed), k1 = static_cast<std::uint32_t>(seed >> 32);
  const float span = hi - lo;
  const std::size_t size = dtype_size(t);
  for (std::int64_t i = first; i < first + n;) {
    const auto block = static_cast<std::uint64_t>(i) / 4;
    const ejk_u32x4 r = ejk_philox4x32_10(
        ejk_make4(static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(block >> 32), fill_tag, 0), k0, k1);
    const std::uint32_t words[4] = {r.x, r.y, r.z, r.w};
    for (auto lane = static_cast<std::int64_t>(i % 4); lane < 4 && i < first + n; ++lane, ++i) {
      const float u = static_cast<float>(words[lane] >> 8) * 0x1p-24f;
      // Two correctly rounded steps, never fused (this file is built with -ffp-contract=off):
      // what every device computes alike, where a shader's fma may or may not be fused.
      const float scaled = span * u;
      const float x = scaled + lo;
      // i32 takes the floor: integers spread evenly over [lo, hi).
      store_element(t, t == DType::i32 ? std::floor(static_cast<double>(x)) : x, out + static_cast<std::size_t>(i - first) * size);
    }
  }
}

}  // namespace

std::uint32_t fill_code(DType t) {
  switch (t) {
    case DType::f32: return 0;
    case DType::f16: return 1;
    case DType::bf16: return 2;
    case DType::i32: return 3;
  }
  throw InvalidArgument("fill of an unknown dtype");
}

void Device::fill_uniform(Buffer& dst, DType t, std::int64_t first, std::int64_t count, std::uint64_t seed, float lo,
                          float hi) {
  const std::int64_t begin = std::min((first + 3) / 4 * 4, first + count), end = std::max(begin, (first + count) / 4 * 4);
  if (begin > first) Device::fill_blocks(dst, t, first, begin - first, seed, lo, hi);
  if (end > begin) fill_blocks(dst, t, begin, end - begin, seed, lo, hi);
  if (first + count > end) Device::fill_blocks(dst, t, end, first + count - end, seed, lo, hi);
}

void Device::fill_blocks(Buffer& dst, DType t, std::int64_t first, std::int64_t count, std::uint64_t seed, float lo,
                         float hi) {
  const std::size_t size = dtype_size(t);
  // Slices of 4 Mi elements, each made by every core at once, then uploaded.
  constexpr std::int64_t slice = std::int64_t{1} << 22;
  std::vector<std::byte> bytes(static_cast<std::size_t>(std::min(count, slice)) * size);
  for (std::int64_t at = first; at < first + count; at += slice) {
    const std::int64_t n = std::min(slice, first + count - at);
    // Parts of whole Philox blocks (4 elements) where the slice starts on one.
    for_parts(n, 4, [&](std::int64_t, std::int64_t a, std::int64_t b) {
      generate(t, seed, lo, hi, at + a, b - a, bytes.data() + static_cast<std::size_t>(a) * size);
    });
    write(dst, static_cast<std::size_t>(at) * size, bytes.data(), static_cast<std::size_t>(n) * size);
  }
}

void fill_uniform(const Tensor& t, std::uint64_t seed, float lo, float hi) {
  if (!(std::isfinite(lo) && std::isfinite(hi) && lo <= hi && std::isfinite(hi - lo)))
    throw InvalidArgument("fill_uniform of a tensor of shape " + to_string(t.shape()) + ": the range [" + std::to_string(lo) +
                          ", " + std::to_string(hi) + ") must be finite with lo <= hi");
  if (t.numel() > 0) t.device().fill_uniform(t.buffer(), t.dtype(), 0, t.numel(), seed, lo, hi);
}

}  // namespace ejk
