// matmul on NVIDIA tensor cores from OpenCL C (sm_80 and later, inline PTX): C = alpha * op(A)
// op(B) + beta * C in f16 or bf16 with f32 accumulation, one BM x BN tile of C a workgroup by
// common/clc_gemm_mma.h. Workgroups run in groups of GROUP_M rows of tiles, so the B panels a group
// shares stay in L2.
//
// Defines: those of common/clc_gemm_mma.h, GROUP_M.
#include "common/clc.h"
#include "common/clc_mma.h"
#include "common/clc_gemm_mma.h"

__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void gemm_mma(
    int M, int N, int K, float alpha, float beta, __global const ushort* restrict A, int lda, long stride_a,
    __global const ushort* restrict B, int ldb, long stride_b, __global EJK_ELEM(GEMM_ST)* restrict C, int ldc,
    long stride_c) {
  __local ushort smem[GEMM_LOCAL] EJK_ALIGN16;

  // Grouped order: GROUP_M rows of tiles are visited column by column.
  const int tiles_m = EJK_CEIL_DIV(M, BM), tiles_n = EJK_CEIL_DIV(N, BN);
  const int id = get_group_id(0), in_group = GROUP_M * tiles_n;
  const int first_m = (id / in_group) * GROUP_M;
  const int group_rows = min(tiles_m - first_m, GROUP_M);
  const int tm = first_m + (id % in_group) % group_rows, tn = (id % in_group) / group_rows;
  const long z = get_group_id(1);

  float acc[MI][NI][4];
  gemm_tile(acc, EJK_SMEM(smem), A + z * stride_a, lda, B + z * stride_b, ldb, M, N, K, tm * BM, tn * BN);
  gemm_store(acc, C + z * stride_c, ldc, M, N, tm * BM, tn * BN, alpha, beta, (ldc & 1) == 0 && (stride_c & 1) == 0);
}
