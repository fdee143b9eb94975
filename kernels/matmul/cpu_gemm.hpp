#pragma once
// The native CPU GEMM: packed panels, a register-blocked micro-kernel, one build per ISA.
#include <cstdint>

#include "backends/cpu/thread_pool.hpp"
#include "ejk/dtype.hpp"

namespace ejk::kernels::matmul::cpu {

struct Operands {
  std::int64_t m, n, k;
  const void* a;  // element (i, p) at a[i * rs_a + p * cs_a]
  std::int64_t rs_a, cs_a;
  const void* b;  // element (p, j) at b[p * rs_b + j * cs_b]
  std::int64_t rs_b, cs_b;
  float* c;  // f32, row-major with leading dimension ldc; already scaled by beta
  std::int64_t ldc;
  float alpha;
  DType dtype;  // of a and b
};

struct Blocking {
  int mc, kc, nc;  // cache blocks
  int mr, nv;      // micro-tile: mr rows by nv vectors of columns
};

// Vector width in floats of each build.
constexpr int avx512_lanes = 16, avx2_lanes = 8, generic_lanes = 4;

void gemm_avx512(const Operands& op, const Blocking& blk, ejk::cpu::ThreadPool& pool);
void gemm_avx2(const Operands& op, const Blocking& blk, ejk::cpu::ThreadPool& pool);
void gemm_generic(const Operands& op, const Blocking& blk, ejk::cpu::ThreadPool& pool);

}  // namespace ejk::kernels::matmul::cpu
