// grouped_matmul and grouped_matmul_tgmm on NVIDIA tensor cores from OpenCL C (sm_80 and later,
// inline PTX): each workgroup computes one BM x BN output tile by common/clc_gemm_mma.h, the
// matmul tile, over one group's rows. f16 or bf16 operands, f32 accumulation.
//
// Defines: those of common/clc_gemm_mma.h; TRANS_A 0 and TRANS_B trans_rhs for gmm, TRANS_A 1 and
// TRANS_B 0 for tgmm (the other kernel of the program is not launched).
#include "common/clc.h"
#include "common/clc_mma.h"
#include "common/clc_gemm_mma.h"
#include "grouped_matmul_slots.h"

typedef EJK_ELEM(GEMM_ST) elem;

// Grid: (column tiles, row-tile slots). Slot s is the s-th row tile counting through the groups
// in order (ceil(size / BM) tiles each); the grid has ceil(m / BM) + groups slots, at least as
// many as there are tiles, and surplus slots return. Sizes are clamped to what is left of m.
__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void gmm(const __global ushort* lhs,
                                                                        const __global ushort* rhs,
                                                                        const __global int* sizes, __global elem* out,
                                                                        int m, int n, int k, int groups) {
  __local ushort smem[GEMM_LOCAL] EJK_ALIGN16;
  int slot = get_group_id(1), off, size;
  const int g = slot_group(sizes, groups, m, BM, &slot, &off, &size);
  if (g == groups) return;  // the whole workgroup: no barrier is left waiting
  const int n0 = get_group_id(0) * BN;
  float acc[MI][NI][4];
  // The group's rows as an M = size matrix; its expert's weights [k, n] (trans_rhs: [n, k]).
  gemm_tile(acc, EJK_SMEM(smem), lhs + (long)off * k, k, rhs + (long)g * k * n, TRANS_B ? k : n, size, n, k, slot * BM, n0);
  gemm_store(acc, out + (long)off * n, n, size, n, slot * BM, n0, 1.0f, 0.0f, true);
}

// Grid: (column tiles of n, row tiles of k, groups): out[g] = lhs_g^T grad_g, reduced over the
// group's rows (an empty group stores zeros).
__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void tgmm(const __global ushort* lhs,
                                                                         const __global ushort* grad,
                                                                         const __global int* sizes, __global elem* out,
                                                                         int m, int n, int k, int groups) {
  __local ushort smem[GEMM_LOCAL] EJK_ALIGN16;
  const int g = get_group_id(2);
  int off = 0;
  for (int h = 0; h < g; ++h) off += clamp(sizes[h], 0, m - off);
  const int rows = clamp(sizes[g], 0, m - off);
  const int i0 = get_group_id(1) * BM, n0 = get_group_id(0) * BN;
  float acc[MI][NI][4];
  // A = lhs_g stored [rows][k]: the k x rows operand transposed; B = grad_g [rows][n].
  gemm_tile(acc, EJK_SMEM(smem), lhs + (long)off * k, k, grad + (long)off * n, n, k, n, rows, i0, n0);
  gemm_store(acc, out + (long)g * k * n, n, k, n, i0, n0, 1.0f, 0.0f, true);
}
