#pragma once
// The native GEMM build this processor runs, picked at run time. Not included by the per-ISA
// files: their -m flags must not reach these inline functions.
#include "matmul/cpu_gemm.hpp"

namespace ejk::kernels::matmul::cpu {

// The widest build's vector width in floats.
inline int native_lanes() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return avx512_lanes;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return avx2_lanes;
#endif
  return generic_lanes;
}

inline void gemm_native(const Operands& op, const Blocking& blk, ejk::cpu::ThreadPool& pool) {
  switch (native_lanes()) {
    case avx512_lanes: return gemm_avx512(op, blk, pool);
    case avx2_lanes: return gemm_avx2(op, blk, pool);
    default: return gemm_generic(op, blk, pool);
  }
}

}  // namespace ejk::kernels::matmul::cpu
