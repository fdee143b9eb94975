// matmul on NVIDIA tensor cores from OpenCL C (sm_80 and later, inline PTX): C = alpha * op(A)
// op(B) + beta * C in f16 or bf16 with f32 accumulation. The design of the CUDA backend's
// matmul.cu: a workgroup computes a BM x BN tile of C with WM x WN warps; K is walked in BK slices
// through a STAGES-deep ring of local-memory tiles filled by cp.async (16 bytes a work-item,
// zero-filled past the edges), fragments read by ldmatrix (.trans where the operand's contiguous
// dimension is not k) and multiplied by mma.sync m16n8k16. Workgroups run in groups of GROUP_M
// rows of tiles, so the B panels a group shares stay in L2.
//
// The eight rows an ldmatrix reads must fall in distinct banks. NVIDIA's OpenCL gives a workgroup
// 48 KiB of local memory (CUDA kernels may opt into 227 KiB), which bounds BM, BN, BK and STAGES
// together, so rather than padding rows (SWIZZLE 0: 16 bytes a row) the tiles may keep rows
// unpadded with each row's 16-byte chunks permuted by an XOR of the row (SWIZZLE 1): 128 x 128
// tiles then fit three stages of 32-deep slices instead of two.
//
// Defines: BM BN BK WM WN STAGES GROUP_M TRANS_A TRANS_B BF16 SWIZZLE PIPE.
#include "common/clc.h"
#include "common/clc_mma.h"

#if BF16
#define ST 2
#else
#define ST 1
#endif

#define THREADS (WM * WN * 32)
#define WTM (BM / WM)  // warp tile rows
#define WTN (BN / WN)  // warp tile columns
#define MI (WTM / 16)  // m16 tiles a warp
#define NI (WTN / 8)   // n8 tiles a warp (even: B is read two n8 tiles at a time)
#define KSTEPS (BK / 16)
// Local tiles in their memory layout: COLS contiguous elements a row, rows ROW elements apart.
#define A_COLS (TRANS_A ? BM : BK)
#define B_COLS (TRANS_B ? BK : BN)
#define A_ROW (A_COLS + 8 * (1 - SWIZZLE))
#define B_ROW (B_COLS + 8 * (1 - SWIZZLE))
#define A_TILE ((TRANS_A ? BK : BM) * A_ROW)
#define B_TILE ((TRANS_B ? BN : BK) * B_ROW)

// The shared address of element (r, col) of a tile at `base` (col a multiple of 8). Swizzled, the
// 16-byte chunk c of row r lies at chunk c ^ f(r), f taking 8 / rows-a-128-byte-line values over
// the rows that share banks, so any eight consecutive rows' chunk c meet eight distinct banks.
uint at(uint base, int r, int col, const int COLS, const int ROW) {
  int c = col >> 3;
  if (SWIZZLE) {
    const int w = COLS / 8;                 // chunks a row
    const int shared = w >= 8 ? 1 : 8 / w;  // rows a 128-byte line holds
    c ^= (r / shared) % (w >= 8 ? 8 : w);
  }
  return base + (uint)(r * ROW + (c << 3)) * 2u;
}

// A ROWS x COLS tile (COLS contiguous) of a rows x cols matrix with leading dimension ld, from
// (r0, c0), into local memory at `dst` in 16-byte chunks: zero past the matrix. The arguments in
// capitals are constants once inlined.
void load_tile(uint dst, __global const ushort* src, int ld, int rows, int cols, int r0, int c0, int tid,
               const int ROWS, const int COLS, const int ROW) {
  const int chunks = ROWS * COLS / 8;
#pragma unroll
  for (int i = 0; i < (chunks + THREADS - 1) / THREADS; ++i) {
    const int c = tid + i * THREADS;
    if (chunks % THREADS != 0 && c >= chunks) break;
    const int r = c / (COLS / 8), col = (c % (COLS / 8)) * 8;
    const int gr = r0 + r, gc = c0 + col;
    const int left = cols - gc;
    const uint bytes = gr < rows && left > 0 ? (left >= 8 ? 16u : 2u * (uint)left) : 0u;
    cp16(at(dst, r, col, COLS, ROW), bytes ? src + (long)gr * ld + gc : src, bytes);
  }
}

// Slice `slice` of A and B into its stage buffers, each in the layout it is stored in.
void load_slice(uint a_stages, uint b_stages, int slice, __global const ushort* A, __global const ushort* B, int M,
                int N, int K, int lda, int ldb, int m0, int n0, int tid) {
  const int s = slice % STAGES, k0 = slice * BK;
  const uint as = a_stages + s * A_TILE * 2, bs = b_stages + s * B_TILE * 2;
  // A: TRANS_A ? BK rows of BM (rows k, contiguous m) : BM rows of BK (rows m, contiguous k)
  if (TRANS_A) load_tile(as, A, lda, K, M, k0, m0, tid, BK, A_COLS, A_ROW);
  else load_tile(as, A, lda, M, K, m0, k0, tid, BM, A_COLS, A_ROW);
  // B: TRANS_B ? BN rows of BK (rows n, contiguous k) : BK rows of BN (rows k, contiguous n)
  if (TRANS_B) load_tile(bs, B, ldb, N, K, n0, k0, tid, BN, B_COLS, B_ROW);
  else load_tile(bs, B, ldb, K, N, k0, n0, tid, BK, B_COLS, B_ROW);
}

// A warp's A and B fragments for the 16-deep k step at kk of the tiles at `as` and `bs`.
void frags(uint af[MI][4], uint bf[NI][2], uint as, uint bs, int kk, int wm, int wn, int lane) {
#pragma unroll
  for (int i = 0; i < MI; ++i) {
    const int m = wm * WTM + i * 16;
#if TRANS_A
    // Stored [k][m]: matrices (m0-7,k0-7) (m8-15,k0-7) (m0-7,k8-15) (m8-15,k8-15), transposed.
    const int r = kk + (lane & 7) + ((lane >> 4) << 3), c = m + (((lane >> 3) & 1) << 3);
    ldsm_x4_t(af[i], at(as, r, c, A_COLS, A_ROW));
#else
    // Stored [m][k]: matrices (m0-7, k0-7) (m8-15, k0-7) (m0-7, k8-15) (m8-15, k8-15).
    const int r = m + (lane & 15), c = kk + (lane >> 4) * 8;
    ldsm_x4(af[i], at(as, r, c, A_COLS, A_ROW));
#endif
  }
#pragma unroll
  for (int j = 0; j < NI; j += 2) {
    const int n = wn * WTN + j * 8;
    uint r4[4];
#if TRANS_B
    // Stored [n][k]: matrices (n0-7, k0-7) (n0-7, k8-15) (n8-15, k0-7) (n8-15, k8-15).
    const int r = n + (lane & 7) + ((lane >> 4) << 3), c = kk + ((lane >> 3) & 1) * 8;
    ldsm_x4(r4, at(bs, r, c, B_COLS, B_ROW));
#else
    // Stored [k][n]: the same matrices read transposed.
    const int r = kk + (lane & 7) + (((lane >> 3) & 1) << 3), c = n + ((lane >> 4) << 3);
    ldsm_x4_t(r4, at(bs, r, c, B_COLS, B_ROW));
#endif
    bf[j][0] = r4[0];
    bf[j][1] = r4[1];
    bf[j + 1][0] = r4[2];
    bf[j + 1][1] = r4[3];
  }
}

void multiply(float acc[MI][NI][4], uint af[MI][4], uint bf[NI][2]) {
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j) mma(acc[i][j], af[i][0], af[i][1], af[i][2], af[i][3], bf[j][0], bf[j][1]);
}

__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void gemm_mma(
    int M, int N, int K, float alpha, float beta, __global const ushort* restrict A, int lda, long stride_a,
    __global const ushort* restrict B, int ldb, long stride_b, __global EJK_ELEM(ST)* restrict C, int ldc,
    long stride_c) {
  __local ushort smem[STAGES * (A_TILE + B_TILE)] EJK_ALIGN16;
  const uint a_stages = EJK_SMEM(smem);
  const uint b_stages = a_stages + STAGES * A_TILE * 2;

  // Grouped order: GROUP_M rows of tiles are visited column by column.
  const int tiles_m = EJK_CEIL_DIV(M, BM), tiles_n = EJK_CEIL_DIV(N, BN);
  const int id = get_group_id(0), in_group = GROUP_M * tiles_n;
  const int first_m = (id / in_group) * GROUP_M;
  const int group_rows = min(tiles_m - first_m, GROUP_M);
  const int tm = first_m + (id % in_group) % group_rows, tn = (id % in_group) / group_rows;
  const int m0 = tm * BM, n0 = tn * BN;
  const long z = get_group_id(1);
  A += z * stride_a;
  B += z * stride_b;
  C += z * stride_c;

  const int tid = get_local_id(0), lane = tid & 31, warp = tid >> 5;
  const int wm = warp / WN, wn = warp % WN;
  const int g = lane >> 2, t = lane & 3;

  float acc[MI][NI][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  const int slices = EJK_CEIL_DIV(K, BK);
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < slices) load_slice(a_stages, b_stages, s, A, B, M, N, K, lda, ldb, m0, n0, tid);
    cp_commit();
  }

#if PIPE
  // Fragments double-buffered across k steps: a step's ldmatrix reads are issued before the
  // previous step's mma, and the next slice's first ones before this slice's last mma (after the
  // barrier that makes the slice visible), so the reads' latency hides under arithmetic.
  uint af[2][MI][4], bf[2][NI][2];
  CP_WAIT(STAGES - 2);
  barrier(CLK_LOCAL_MEM_FENCE);
  frags(af[0], bf[0], a_stages, b_stages, 0, wm, wn, lane);
  for (int kt = 0; kt < slices; ++kt) {
    const int cur = kt % STAGES;
#pragma unroll
    for (int step = 0; step < KSTEPS; ++step) {
      if (step == KSTEPS - 1) {
        // Slice kt + 1 has landed, and every warp is past its reads of slice kt - 1's buffer.
        CP_WAIT(STAGES - 2);
        barrier(CLK_LOCAL_MEM_FENCE);
      }
      const int nb = (step + 1) & 1;
      if (step + 1 < KSTEPS)
        frags(af[nb], bf[nb], a_stages + cur * A_TILE * 2, b_stages + cur * B_TILE * 2, (step + 1) * 16, wm, wn, lane);
      else if (kt + 1 < slices)
        frags(af[nb], bf[nb], a_stages + ((kt + 1) % STAGES) * A_TILE * 2, b_stages + ((kt + 1) % STAGES) * B_TILE * 2, 0,
              wm, wn, lane);
      if (step == 0) {
        // Into the buffer of slice kt - 1, which every warp finished reading before the last barrier.
        const int next = kt + STAGES - 1;
        if (next < slices) load_slice(a_stages, b_stages, next, A, B, M, N, K, lda, ldb, m0, n0, tid);
        cp_commit();
      }
      multiply(acc, af[step & 1], bf[step & 1]);
    }
  }
#else
  for (int kt = 0; kt < slices; ++kt) {
    CP_WAIT(STAGES - 2);
    barrier(CLK_LOCAL_MEM_FENCE);
    // The slice STAGES - 1 ahead goes into the buffer every warp finished with last iteration.
    const int next = kt + STAGES - 1;
    if (next < slices) load_slice(a_stages, b_stages, next, A, B, M, N, K, lda, ldb, m0, n0, tid);
    cp_commit();
    const uint as = a_stages + (kt % STAGES) * A_TILE * 2, bs = b_stages + (kt % STAGES) * B_TILE * 2;
#pragma unroll
    for (int step = 0; step < KSTEPS; ++step) {
      uint af[MI][4], bf[NI][2];
      frags(af, bf, as, bs, step * 16, wm, wn, lane);
      multiply(acc, af, bf);
    }
  }
#endif
  CP_WAIT(0);

  // c0 c1: row g, columns 2t and 2t + 1; c2 c3: row g + 8. Pairs go out as one word where C's
  // rows and batches keep them word-aligned.
  const bool pairs = (ldc & 1) == 0 && (stride_c & 1) == 0;
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = m0 + wm * WTM + i * 16 + g + h * 8, n = n0 + wn * WTN + j * 8 + 2 * t;
        if (m >= M || n >= N) continue;
        const long o = (long)m * ldc + n;
        float v0 = alpha * acc[i][j][2 * h], v1 = alpha * acc[i][j][2 * h + 1];
        if (beta != 0.0f) {
          v0 += beta * EJK_LD(ST, C, o);
          if (n + 1 < N) v1 += beta * EJK_LD(ST, C, o + 1);
        }
        if (n + 1 < N && pairs) {
          ((__global uint*)C)[o / 2] = pack2(v0, v1);
        } else {
          EJK_ST(ST, C, o, v0);
          if (n + 1 < N) EJK_ST(ST, C, o + 1, v1);
        }
      }
}
