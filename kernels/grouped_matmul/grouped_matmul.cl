// grouped_matmul and grouped_matmul_tgmm on OpenCL C 1.2: matmul's tiled GEMM (tiles of the
// operands staged in local memory, a register block per work-item), fed one group at a time.
//
// Compile-time (-D): TM, TN, TK (tile of the output and depth of a staged step), WM, WN (outputs
// per work-item along m and n, strided by the group's extent so that neighbouring work-items read
// neighbouring local words), TRANS_B (grouped_matmul with trans_rhs), DTYPE (0 f32, 1 f16,
// 2 bf16). Sizes are kernel arguments. Storage is read and written through common/clc.h;
// all arithmetic is f32.

#define RM (TM / WM)  // work-items along m (local y)
#define RN (TN / WN)  // work-items along n (local x)
#define THREADS (RM * RN)
#define SA (TM + 1)  // staged tiles are depth-major, rows padded by a word
#define SB (TN + 1)

#include "common/clc.h"
#include "grouped_matmul_slots.h"
#define ELEM EJK_ELEM(DTYPE)
#define LD(p, i) EJK_LD(DTYPE, p, i)
#define ST(p, i, x) EJK_ST(DTYPE, p, i, x)

// c[i, j] = sum_p a(i, p) b(p, j) for i < M, j < N, p < K, where
//   a(i, p) = a[i * lda + p] (TRANS_A 0) or a[p * lda + i] (TRANS_A 1),
//   b(p, j) = b[p * ldb + j] (TRANS_B 0) or b[j * ldb + p] (TRANS_B 1);
// a, b and c already point at the tile's first row / column; M <= TM and N <= TN.
#define TILE_BODY(TRANS_A_, TRANS_B_)                                                                \
  const int tx = get_local_id(0), ty = get_local_id(1), tid = ty * RN + tx;                         \
  float acc[WM][WN];                                                                                \
  for (int i = 0; i < WM; ++i)                                                                      \
    for (int j = 0; j < WN; ++j) acc[i][j] = 0.f;                                                   \
  for (int k0 = 0; k0 < K; k0 += TK) {                                                              \
    for (int e = tid; e < TM * TK; e += THREADS) {                                                  \
      const int i = TRANS_A_ ? e % TM : e / TK, p = TRANS_A_ ? e / TM : e % TK;                     \
      As[p * SA + i] = i < M && k0 + p < K ? LD(a, TRANS_A_ ? (k0 + p) * lda + i : i * lda + k0 + p) \
                                           : 0.f;                                                    \
    }                                                                                               \
    for (int e = tid; e < TN * TK; e += THREADS) {                                                  \
      const int j = TRANS_B_ ? e / TK : e % TN, p = TRANS_B_ ? e % TK : e / TN;                     \
      Bs[p * SB + j] = j < N && k0 + p < K ? LD(b, TRANS_B_ ? j * ldb + k0 + p : (k0 + p) * ldb + j) \
                                           : 0.f;                                                    \
    }                                                                                               \
    barrier(CLK_LOCAL_MEM_FENCE);                                                                   \
    for (int p = 0; p < TK; ++p) {                                                                  \
      float av[WM], bv[WN];                                                                         \
      for (int i = 0; i < WM; ++i) av[i] = As[p * SA + ty + i * RM];                                \
      for (int j = 0; j < WN; ++j) bv[j] = Bs[p * SB + tx + j * RN];                                \
      for (int i = 0; i < WM; ++i)                                                                  \
        for (int j = 0; j < WN; ++j) acc[i][j] = fma(av[i], bv[j], acc[i][j]);                      \
    }                                                                                               \
    barrier(CLK_LOCAL_MEM_FENCE);                                                                   \
  }                                                                                                 \
  for (int i = 0; i < WM; ++i) {                                                                    \
    const int r = ty + i * RM;                                                                      \
    if (r < M)                                                                                      \
      for (int j = 0; j < WN; ++j) {                                                                \
        const int col = tx + j * RN;                                                                \
        if (col < N) ST(c, r * ldc + col, acc[i][j]);                                               \
      }                                                                                             \
  }

// Grid: (column tiles, row-tile slots). Slot s is the s-th row tile counting through the groups
// in order (ceil(size / TM) tiles each); the grid has ceil(m / TM) + groups slots, at least as
// many as there are tiles, and surplus groups store nothing. Sizes are clamped to what is left of m.
__kernel __attribute__((reqd_work_group_size(RN, RM, 1))) void gmm(const __global ELEM* lhs, const __global ELEM* rhs,
                                                                    const __global int* sizes, __global ELEM* out, int m,
                                                                    int n, int k, int groups) {
  __local float As[TK * SA];
  __local float Bs[TK * SB];
  int slot = get_group_id(1), off, size;
  int g = slot_group(sizes, groups, m, TM, &slot, &off, &size);
  // A surplus group runs the tile with nothing to load or store: no return ahead of the barriers,
  // which PoCL's work-group compiler may get wrong (docs/testing.md).
  const bool live = g < groups;
  g = min(g, max(groups - 1, 0));
  const int row0 = live ? off + slot * TM : 0, n0 = get_group_id(0) * TN;
  const int M = live ? min(TM, off + size - row0) : 0, N = min(TN, n - n0), K = live ? k : 0;
  const __global ELEM* a = lhs + row0 * k;
  const int lda = k;
#if TRANS_B
  const __global ELEM* b = rhs + g * n * k + n0 * k;
  const int ldb = k;
#else
  const __global ELEM* b = rhs + g * k * n + n0;
  const int ldb = n;
#endif
  __global ELEM* c = out + row0 * n + n0;
  const int ldc = n;
  TILE_BODY(0, TRANS_B)
}

// Grid: (column tiles of n, row tiles of k, groups): out[g] = lhs_g^T . grad_g, reduced over the
// group's rows TK at a time; an empty group stores zeros. (groups: the same arguments as gmm.)
__kernel __attribute__((reqd_work_group_size(RN, RM, 1))) void tgmm(const __global ELEM* lhs, const __global ELEM* grad,
                                                                     const __global int* sizes, __global ELEM* out, int m,
                                                                     int n, int k, int groups) {
  __local float As[TK * SA];
  __local float Bs[TK * SB];
  const int g = get_group_id(2);
  int off = 0;
  for (int h = 0; h < g; ++h) off += clamp(sizes[h], 0, m - off);
  const int K = clamp(sizes[g], 0, m - off);
  const int i0 = get_group_id(1) * TM, n0 = get_group_id(0) * TN;
  const int M = min(TM, k - i0), N = min(TN, n - n0);
  const __global ELEM* a = lhs + off * k + i0;
  const int lda = k;
  const __global ELEM* b = grad + off * n + n0;
  const int ldb = n;
  __global ELEM* c = out + (g * k + i0) * n + n0;
  const int ldc = n;
  TILE_BODY(1, 0)
}
