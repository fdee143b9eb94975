#include "common/convert.hpp"

#include <algorithm>
#include <bit>

#if defined(__x86_64__)
#include <immintrin.h>

#include "backends/cpu/cpu_features.hpp"
#endif

namespace ejk::kernels {
namespace {

#if defined(__x86_64__)
bool has_f16c() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && cpu::has_f16c();
}

__attribute__((target("avx2,f16c"))) void widen_f16c(const std::uint16_t* p, std::int64_t n, float* dst) {
  std::int64_t c = 0;
  for (; c + 8 <= n; c += 8) _mm256_storeu_ps(dst + c, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + c))));
  for (; c < n; ++c) dst[c] = f16_to_f32(p[c]);
}

__attribute__((target("avx2,f16c"))) void narrow_f16c(const float* src, std::int64_t n, std::uint16_t* p) {
  std::int64_t c = 0;
  for (; c + 8 <= n; c += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + c), _mm256_cvtps_ph(_mm256_loadu_ps(src + c), _MM_FROUND_TO_NEAREST_INT));
  for (; c < n; ++c) p[c] = f32_to_f16(src[c]);
}

const bool f16c = has_f16c();
#endif

}  // namespace

void widen(const void* base, DType t, std::int64_t i, std::int64_t n, float* dst) {
  if (t == DType::f32) {
    std::copy_n(static_cast<const float*>(base) + i, n, dst);
    return;
  }
  const auto* p = static_cast<const std::uint16_t*>(base) + i;
  if (t == DType::bf16) {
    for (std::int64_t c = 0; c < n; ++c) dst[c] = std::bit_cast<float>(std::uint32_t{p[c]} << 16);
    return;
  }
#if defined(__x86_64__)
  if (f16c) return widen_f16c(p, n, dst);
#endif
  for (std::int64_t c = 0; c < n; ++c) dst[c] = f16_to_f32(p[c]);
}

void narrow(const float* src, std::int64_t n, void* base, DType t, std::int64_t i) {
  if (t == DType::f32) {
    std::copy_n(src, n, static_cast<float*>(base) + i);
    return;
  }
  auto* p = static_cast<std::uint16_t*>(base) + i;
  if (t == DType::bf16) {
    // f32_to_bf16 inline (round to nearest even, NaN kept quiet), so that the loop vectorises.
    for (std::int64_t c = 0; c < n; ++c) {
      const auto f = std::bit_cast<std::uint32_t>(src[c]);
      const auto rounded = static_cast<std::uint16_t>((f + 0x7fffu + ((f >> 16) & 1u)) >> 16);
      p[c] = (f & 0x7fffffffu) > 0x7f800000u ? static_cast<std::uint16_t>((f >> 16) | 0x40u) : rounded;
    }
    return;
  }
#if defined(__x86_64__)
  if (f16c) return narrow_f16c(src, n, p);
#endif
  for (std::int64_t c = 0; c < n; ++c) p[c] = f32_to_f16(src[c]);
}

}  // namespace ejk::kernels
