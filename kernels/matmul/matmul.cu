// matmul on NVIDIA tensor cores (sm_80 and later): C = alpha * op(A) op(B) + beta * C in f16 or
// bf16 with f32 accumulation, or (TF32) in f32 with the operands rounded to TF32. A block computes
// a BM x BN tile of C with WM x WN warps; K is walked in BK slices through a STAGES-deep ring of
// shared-memory tiles filled by cp.async (16 bytes a thread, zero-filled past the edges) and
// multiplied by mma.sync (m16n8k16, or m16n8k8 on TF32). Blocks run in groups of GROUP_M rows of
// tiles, so the B panels a group shares stay in L2.
//
// Fragments come from shared memory by ldmatrix, whose 8 x 8 matrices of 16-bit words are 8 x 4
// matrices of f32 words just as well (lane l gets row l / 4, word l % 4: the TF32 fragment's
// element). 16-bit operands stored with K not contiguous are read by ldmatrix .trans, which has
// no 32-bit form, so TF32 reads those one word a thread. Shared rows are padded by 16 bytes, so
// the eight rows an ldmatrix reads fall in distinct banks; TF32's word reads take rows k t (t =
// lane % 4) at columns g (lane / 4), in distinct banks with 32 bytes of padding.
//
// Build options (kernels/matmul/cuda.cpp): BM BN BK WM WN STAGES GROUP_M TRANS_A TRANS_B BF16 TF32.

#include "common/cuda.cuh"

#if TF32
typedef float op_t;  // operand and C storage
#define VEC 4        // elements in 16 bytes
#define KSTEP 8      // k of one mma
#define A_PAD (TRANS_A ? 8 : 4)
#define B_PAD (TRANS_B ? 4 : 8)
#else
typedef elem_t op_t;
#define VEC 8
#define KSTEP 16
#define A_PAD 8
#define B_PAD 8
#endif

#define THREADS (WM * WN * 32)
#define WTM (BM / WM)  // warp tile rows
#define WTN (BN / WN)  // warp tile columns
#define MI (WTM / 16)  // m16 tiles a warp
#define NI (WTN / 8)   // n8 tiles a warp (even: B is read two n8 tiles at a time)
// Shared row strides in elements.
#define A_ROW ((TRANS_A ? BM : BK) + A_PAD)
#define B_ROW ((TRANS_B ? BK : BN) + B_PAD)
#define A_TILE ((TRANS_A ? BK : BM) * A_ROW)
#define B_TILE ((TRANS_B ? BN : BK) * B_ROW)

// A ROWS x COLS tile (COLS contiguous, rows STRIDE apart in shared memory) of a rows x cols
// matrix with leading dimension ld, from (r0, c0), in 16-byte chunks: zero past the matrix.
template <int ROWS, int COLS, int STRIDE>
__device__ __forceinline__ void load_tile(op_t* dst, const op_t* src, int ld, int rows, int cols, int r0, int c0,
                                          int tid) {
  constexpr int chunks = ROWS * COLS / VEC;
#pragma unroll
  for (int c = tid; c < chunks; c += THREADS) {
    const int r = c / (COLS / VEC), col = (c % (COLS / VEC)) * VEC;
    const int gr = r0 + r, gc = c0 + col;
    const int left = cols - gc;
    const int bytes = gr < rows && left > 0 ? (left >= VEC ? 16 : static_cast<int>(sizeof(op_t)) * left) : 0;
    cp16(dst + r * STRIDE + col, bytes ? src + static_cast<long long>(gr) * ld + gc : src, bytes);
  }
}

// One BK slice of A and B into stage buffers, each in the layout it is stored in.
__device__ __forceinline__ void load_slice(op_t* as, op_t* bs, const op_t* A, const op_t* B, int M, int N,
                                           int K, int lda, int ldb, int m0, int n0, int k0, int tid) {
  // A: TRANS_A ? BK rows of BM (rows k, contiguous m) : BM rows of BK (rows m, contiguous k)
  if (TRANS_A) load_tile<BK, BM, A_ROW>(as, A, lda, K, M, k0, m0, tid);
  else load_tile<BM, BK, A_ROW>(as, A, lda, M, K, m0, k0, tid);
  // B: TRANS_B ? BN rows of BK (rows n, contiguous k) : BK rows of BN (rows k, contiguous n)
  if (TRANS_B) load_tile<BN, BK, B_ROW>(bs, B, ldb, N, K, n0, k0, tid);
  else load_tile<BK, BN, B_ROW>(bs, B, ldb, K, N, k0, n0, tid);
}

extern "C" __global__ void __launch_bounds__(THREADS) ejk_gemm_mma(int M, int N, int K, float alpha, float beta,
                                                                   const op_t* __restrict__ A, int lda,
                                                                   long long stride_a, const op_t* __restrict__ B,
                                                                   int ldb, long long stride_b, op_t* __restrict__ C,
                                                                   int ldc, long long stride_c) {
  extern __shared__ __align__(16) unsigned char smem[];
  op_t* const a_stages = reinterpret_cast<op_t*>(smem);
  op_t* const b_stages = a_stages + STAGES * A_TILE;

  // Grouped order: GROUP_M rows of tiles are visited column by column.
  const int tiles_m = ceil_div(M, BM), tiles_n = ceil_div(N, BN);
  const int id = blockIdx.x, in_group = GROUP_M * tiles_n;
  const int first_m = (id / in_group) * GROUP_M;
  const int group_rows = min(tiles_m - first_m, GROUP_M);
  const int tm = first_m + (id % in_group) % group_rows, tn = (id % in_group) / group_rows;
  const int m0 = tm * BM, n0 = tn * BN;
  A += blockIdx.z * stride_a;
  B += blockIdx.z * stride_b;
  C += blockIdx.z * stride_c;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / WN, wn = warp % WN;
  const int g = lane >> 2, t = lane & 3;

  float acc[MI][NI][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  const int slices = ceil_div(K, BK);
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < slices) load_slice(a_stages + s * A_TILE, b_stages + s * B_TILE, A, B, M, N, K, lda, ldb, m0, n0, s * BK, tid);
    cp_commit();
  }

  for (int kt = 0; kt < slices; ++kt) {
    cp_wait<STAGES - 2>();
    __syncthreads();
    // The slice STAGES - 1 ahead goes into the buffer every warp finished with last iteration.
    const int next = kt + STAGES - 1;
    if (next < slices) {
      const int s = next % STAGES;
      load_slice(a_stages + s * A_TILE, b_stages + s * B_TILE, A, B, M, N, K, lda, ldb, m0, n0, next * BK, tid);
    }
    cp_commit();

    const op_t* as = a_stages + (kt % STAGES) * A_TILE;
    const op_t* bs = b_stages + (kt % STAGES) * B_TILE;
#pragma unroll
    for (int kk = 0; kk < BK; kk += KSTEP) {
      unsigned af[MI][4], bf[NI][2];
#pragma unroll
      for (int i = 0; i < MI; ++i) {
        const int m = wm * WTM + i * 16;
#if TF32 && TRANS_A
        // Stored [k][m]: a0 (m g, k t), a1 (m g + 8, k t), a2 and a3 the same at k t + 4.
        const op_t* p = as + (kk + t) * A_ROW + m + g;
        af[i][0] = to_tf32(p[0]);
        af[i][1] = to_tf32(p[8]);
        af[i][2] = to_tf32(p[4 * A_ROW]);
        af[i][3] = to_tf32(p[4 * A_ROW + 8]);
#elif TRANS_A
        // Stored [k][m]: matrices (m0-7,k0-7) (m8-15,k0-7) (m0-7,k8-15) (m8-15,k8-15), transposed.
        const int r = kk + (lane & 7) + ((lane >> 4) << 3), c = m + (((lane >> 3) & 1) << 3);
        ldsm_x4_t(af[i], as + r * A_ROW + c);
#else
        // Stored [m][k]: matrices (m0-7, first half of the k step) (m8-15, first) (m0-7, second)
        // (m8-15, second).
        const int r = m + (lane & 15), c = kk + (lane >> 4) * (KSTEP / 2);
        ldsm_x4(af[i], as + r * A_ROW + c);
#if TF32
#pragma unroll
        for (int e = 0; e < 4; ++e) af[i][e] = to_tf32(__uint_as_float(af[i][e]));
#endif
#endif
      }
#pragma unroll
      for (int j = 0; j < NI; j += 2) {
        const int n = wn * WTN + j * 8;
#if TF32 && !TRANS_B
        // Stored [k][n]: b0 (k t, n g), b1 (k t + 4, n g).
        const op_t* p = bs + (kk + t) * B_ROW + n + g;
        bf[j][0] = to_tf32(p[0]);
        bf[j][1] = to_tf32(p[4 * B_ROW]);
        bf[j + 1][0] = to_tf32(p[8]);
        bf[j + 1][1] = to_tf32(p[4 * B_ROW + 8]);
#else
        unsigned r4[4];
#if TRANS_B
        // Stored [n][k]: matrices (n0-7, first half of the k step) (n0-7, second) (n8-15, first)
        // (n8-15, second).
        const int r = n + (lane & 7) + ((lane >> 4) << 3), c = kk + ((lane >> 3) & 1) * (KSTEP / 2);
        ldsm_x4(r4, bs + r * B_ROW + c);
#if TF32
#pragma unroll
        for (int e = 0; e < 4; ++e) r4[e] = to_tf32(__uint_as_float(r4[e]));
#endif
#else
        // Stored [k][n]: the same matrices read transposed.
        const int r = kk + (lane & 7) + (((lane >> 3) & 1) << 3), c = n + ((lane >> 4) << 3);
        ldsm_x4_t(r4, bs + r * B_ROW + c);
#endif
        bf[j][0] = r4[0];
        bf[j][1] = r4[1];
        bf[j + 1][0] = r4[2];
        bf[j + 1][1] = r4[3];
#endif
      }
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#if TF32
          mma_tf32(acc[i][j], af[i], bf[j][0], bf[j][1]);
#else
          mma(acc[i][j], af[i], bf[j][0], bf[j][1]);
#endif
    }
  }
  cp_wait<0>();

  // c0 c1: row g, columns 2t and 2t + 1; c2 c3: row g + 8.
  const bool pairs = (ldc & 1) == 0 && (stride_c & 1) == 0;
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = m0 + wm * WTM + i * 16 + g + h * 8, n = n0 + wn * WTN + j * 8 + 2 * t;
        if (m >= M || n >= N) continue;
        op_t* out = C + static_cast<long long>(m) * ldc + n;
        const float v0 = alpha * acc[i][j][2 * h], v1 = alpha * acc[i][j][2 * h + 1];
        if (n + 1 < N && pairs) {
          put2(out, v0, v1, beta);
        } else {
          put1(out, v0, beta);
          if (n + 1 < N) put1(out + 1, v1, beta);
        }
      }
}
