#pragma once
// Processor features the CPU kernels choose vector paths by, beyond what every compiler's
// __builtin_cpu_supports knows (Clang before 16 has no "f16c").
#if defined(__x86_64__)
#include <cpuid.h>

namespace ejk::cpu {

// F16C half-precision conversions, with the AVX state the OS must enable for them.
inline bool has_f16c() {
  __builtin_cpu_init();
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __builtin_cpu_supports("avx") && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}

}  // namespace ejk::cpu
#endif
