/* The tensor-core GEMM tile shared by the OpenCL C `mma` programs (matmul, grouped_matmul) on
   NVIDIA from sm_80: a workgroup of WM x WN warps computes a BM x BN tile of op(A) op(B) with f32
   accumulators in registers; K is walked in BK slices through a STAGES-deep ring of local-memory
   tiles filled by cp.async (16 bytes a work-item, zero-filled past the edges), fragments read by
   ldmatrix (.trans where the operand's contiguous dimension is not k) and multiplied by mma.sync
   m16n8k16. The design of the CUDA backend's matmul.cu.

   The eight rows an ldmatrix reads must fall in distinct banks. NVIDIA's OpenCL gives a workgroup
   48 KiB of local memory (CUDA kernels may opt into 227 KiB), which bounds BM, BN, BK and STAGES
   together, so rather than padding rows (SWIZZLE 0: 16 bytes a row) the tiles may keep rows
   unpadded with each row's 16-byte chunks permuted by an XOR of the row (SWIZZLE 1): 128 x 128
   tiles then fit three stages of 32-deep slices instead of two. PIPE 1 double-buffers the
   fragments across k steps (see gemm_tile).

   Defines: BM BN BK WM WN STAGES TRANS_A TRANS_B SWIZZLE PIPE, and BF16 for common/clc_mma.h.
   Operands are 16-bit words whose rows (and the first row's address) are 16-byte aligned.
   Include after common/clc.h and common/clc_mma.h. */
#ifndef EJK_COMMON_CLC_GEMM_MMA_H
#define EJK_COMMON_CLC_GEMM_MMA_H

#if BF16
#define GEMM_ST 2  // the storage code of common/clc.h's EJK_LD / EJK_ST
#else
#define GEMM_ST 1
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
#if THREADS % (A_COLS / 8) != 0 || THREADS % (B_COLS / 8) != 0
#error "common/clc_gemm_mma.h: a tile row's 16-byte chunks must divide the work-items (MmaTiles::loads_fit)"
#endif

// The shared address of element (r, col) of a tile at `base` (col a multiple of 8). Swizzled, the
// 16-byte chunk c of row r lies at chunk c ^ f(r), f taking 8 / rows-a-128-byte-line values over
// the rows that share banks, so any eight consecutive rows' chunk c meet eight distinct banks.
uint gemm_at(uint base, int r, int col, const int COLS, const int ROW) {
  int c = col >> 3;
  if (SWIZZLE) {
    const int w = COLS / 8;                 // chunks a row
    const int shared = w >= 8 ? 1 : 8 / w;  // rows a 128-byte line holds
    c ^= (r / shared) % (w >= 8 ? 8 : w);
  }
  return base + (uint)(r * ROW + (c << 3)) * 2u;
}

// A work-item's share of a ROWS x COLS tile (COLS contiguous) is one column of 16-byte chunks:
// chunk tid % (COLS / 8) of rows tid / (COLS / 8) + i GEMM_RS (COLS / 8 divides THREADS). Its
// chunks are then GEMM_RS rows apart in both memories, so one global pointer and one local
// offset, kept across the K walk, address them all, where a 64-bit address and a bound a chunk
// would take registers from the accumulators.
#define GEMM_RS(COLS) (THREADS / ((COLS) / 8))
// The local offset of chunk i, `first` that of chunk 0 at row r, column col. Swizzling repeats
// every 8 rows, so the offsets differ by constants unless the chunks are fewer rows apart.
uint gemm_chunk_at(uint first, int r, int col, int i, const int COLS, const int ROW) {
  const int rs = GEMM_RS(COLS);
  return SWIZZLE && rs % 8 != 0 ? gemm_at(0, r + i * rs, col, COLS, ROW) : first + (uint)(i * rs * ROW * 2);
}

// Zeros to the 16 bytes of local memory at `at`: a chunk past the matrix. A zero-length cp.async
// would need an address inside the matrix, a register pair an operand held across the K walk.
void gemm_zero16(uint at) { asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(at), "r"(0) : "memory"); }

// The work-item's chunks of a ROWS x COLS tile of a matrix with leading dimension ld into local
// memory at dst: `src` the global address of its first chunk, at row r, column col of the tile,
// and `first` that chunk's local offset. Checked, what lies from row `rows` or column `cols` of the
// tile on reads as zero; unchecked, the tile lies inside the matrix. The bounds count from the
// tile's corner, the same for every work-item, so that they stay one value each rather than
// becoming an induction variable a chunk.
void gemm_load_tile(uint dst, uint first, __global const ushort* src, int ld, int r, int col, bool checked, int rows,
                    int cols, const int ROWS, const int COLS, const int ROW) {
  const int rs = GEMM_RS(COLS);
#pragma unroll
  for (int i = 0; i < EJK_CEIL_DIV(ROWS, rs); ++i) {
    if (ROWS % rs != 0 && r + i * rs >= ROWS) continue;  // past a tile of fewer rows
    const uint at = dst + gemm_chunk_at(first, r, col, i, COLS, ROW);
    __global const ushort* p = src + (long)(i * rs) * ld;
    if (!checked) cp16(at, p, 16u);
    else if (r + i * rs < rows && col < cols) cp16(at, p, col + 8 <= cols ? 16u : 2u * (uint)(cols - col));
    else gemm_zero16(at);
  }
}

// A work-item's addresses for the next slice it loads (gemm_loads: slice 0; gemm_loads_next steps).
typedef struct {
  __global const ushort *a, *b;  // the global addresses of the work-item's first chunks
  uint a_first, b_first;         // their local offsets within a stage
} GemmLoads;

GemmLoads gemm_loads(__global const ushort* A, int lda, __global const ushort* B, int ldb, int m0, int n0, int tid) {
  const int ar = tid / (A_COLS / 8), ac = tid % (A_COLS / 8) * 8;
  const int br = tid / (B_COLS / 8), bc = tid % (B_COLS / 8) * 8;
  GemmLoads l;
  l.a = A + (TRANS_A ? (long)ar * lda + m0 + ac : (long)(m0 + ar) * lda + ac);
  l.b = B + (TRANS_B ? (long)(n0 + br) * ldb + bc : (long)br * ldb + n0 + bc);
  l.a_first = gemm_at(0, ar, ac, A_COLS, A_ROW);
  l.b_first = gemm_at(0, br, bc, B_COLS, B_ROW);
  return l;
}

// Slice `slice` of A and B into its stage buffers, each in the layout it is stored in; `l` the
// work-item's addresses for this slice. Only slices past K or tiles past M or N check bounds.
void gemm_load_slice(uint a_stages, uint b_stages, int slice, GemmLoads l, __global const ushort* A,
                     __global const ushort* B, int M, int N, int K, int lda, int ldb, int m0, int n0, int tid) {
  const int s = slice % STAGES, k0 = slice * BK;
  const uint as = a_stages + s * A_TILE * 2, bs = b_stages + s * B_TILE * 2;
  const int ar = tid / (A_COLS / 8), ac = tid % (A_COLS / 8) * 8;
  const int br = tid / (B_COLS / 8), bc = tid % (B_COLS / 8) * 8;
  if (m0 + BM <= M && n0 + BN <= N && k0 + BK <= K) {
    gemm_load_tile(as, l.a_first, l.a, lda, ar, ac, false, 0, 0, TRANS_A ? BK : BM, A_COLS, A_ROW);
    gemm_load_tile(bs, l.b_first, l.b, ldb, br, bc, false, 0, 0, TRANS_B ? BN : BK, B_COLS, B_ROW);
  } else {
    // A: TRANS_A ? BK rows of BM (rows k, contiguous m) : BM rows of BK (rows m, contiguous k)
    if (TRANS_A) gemm_load_tile(as, l.a_first, l.a, lda, ar, ac, true, K - k0, M - m0, BK, A_COLS, A_ROW);
    else gemm_load_tile(as, l.a_first, l.a, lda, ar, ac, true, M - m0, K - k0, BM, A_COLS, A_ROW);
    // B: TRANS_B ? BN rows of BK (rows n, contiguous k) : BK rows of BN (rows k, contiguous n)
    if (TRANS_B) gemm_load_tile(bs, l.b_first, l.b, ldb, br, bc, true, N - n0, K - k0, BN, B_COLS, B_ROW);
    else gemm_load_tile(bs, l.b_first, l.b, ldb, br, bc, true, K - k0, N - n0, BK, B_COLS, B_ROW);
  }
}

// The addresses of the next slice.
void gemm_loads_next(GemmLoads* l, int lda, int ldb) {
  l->a += TRANS_A ? (long)BK * lda : BK;
  l->b += TRANS_B ? BK : (long)BK * ldb;
}

// gemm_at for row r + r16, r16 a multiple of 16: swizzling repeats every 8 rows, so r16 only adds a
// constant. Keeping the constant rows out of the swizzle leaves a warp as many lane offsets as
// the reads have distinct columns (kept across the K walk), each read then a constant away.
uint gemm_at16(uint base, int r16, int r, int col, const int COLS, const int ROW) {
  return base + (uint)(r16 * ROW * 2) + gemm_at(0, r, col, COLS, ROW);
}

// A warp's A and B fragments for the 16-deep k step at kk of the tiles at `as` and `bs`.
void gemm_frags(uint af[MI][4], uint bf[NI][2], uint as, uint bs, int kk, int wm, int wn, int lane) {
#pragma unroll
  for (int i = 0; i < MI; ++i) {
#if TRANS_A
    // Stored [k][m]: matrices (m0-7,k0-7) (m8-15,k0-7) (m0-7,k8-15) (m8-15,k8-15), transposed.
    const int r = (lane & 7) + ((lane >> 4) << 3), c = wm * WTM + i * 16 + (((lane >> 3) & 1) << 3);
    ldsm_x4_t(af[i], gemm_at16(as, kk, r, c, A_COLS, A_ROW));
#else
    // Stored [m][k]: matrices (m0-7, k0-7) (m8-15, k0-7) (m0-7, k8-15) (m8-15, k8-15).
    const int r = wm * WTM + (lane & 15), c = kk + (lane >> 4) * 8;
    ldsm_x4(af[i], gemm_at16(as, i * 16, r, c, A_COLS, A_ROW));
#endif
  }
#pragma unroll
  for (int j = 0; j < NI; j += 2) {
    uint r4[4];
#if TRANS_B
    // Stored [n][k]: matrices (n0-7, k0-7) (n0-7, k8-15) (n8-15, k0-7) (n8-15, k8-15).
    const int r = wn * WTN + (lane & 7) + ((lane >> 4) << 3), c = kk + ((lane >> 3) & 1) * 8;
    ldsm_x4(r4, gemm_at16(bs, j * 8, r, c, B_COLS, B_ROW));
#else
    // Stored [k][n]: the same matrices read transposed.
    const int r = (lane & 7) + (((lane >> 3) & 1) << 3), c = wn * WTN + j * 8 + ((lane >> 4) << 3);
    ldsm_x4_t(r4, gemm_at16(bs, kk, r, c, B_COLS, B_ROW));
#endif
    bf[j][0] = r4[0];
    bf[j][1] = r4[1];
    bf[j + 1][0] = r4[2];
    bf[j + 1][1] = r4[3];
  }
}

void gemm_multiply(float acc[MI][NI][4], uint af[MI][4], uint bf[NI][2]) {
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j) mma(acc[i][j], af[i][0], af[i][1], af[i][2], af[i][3], bf[j][0], bf[j][1]);
}

// The ushort elements of the local array a workgroup passes to gemm_tile (declared EJK_ALIGN16).
#define GEMM_LOCAL (STAGES * (A_TILE + B_TILE))

// acc = op(A) op(B) over the BM x BN tile at (m0, n0) of an M x N product with inner size K: A
// M x K (TRANS_A: stored K x M) with leading dimension lda, B K x N (TRANS_B: N x K) with ldb;
// what lies past M, N or K reads as zero. smem: the shared address of the GEMM_LOCAL array.
void gemm_tile(float acc[MI][NI][4], uint smem, __global const ushort* A, int lda, __global const ushort* B, int ldb,
               int M, int N, int K, int m0, int n0) {
  const uint a_stages = smem, b_stages = smem + STAGES * A_TILE * 2;
  const int tid = get_local_id(0), lane = tid & 31, warp = tid >> 5;
  const int wm = warp / WN, wn = warp % WN;
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  const int slices = EJK_CEIL_DIV(K, BK);
  GemmLoads loads = gemm_loads(A, lda, B, ldb, m0, n0, tid);
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < slices) {
      gemm_load_slice(a_stages, b_stages, s, loads, A, B, M, N, K, lda, ldb, m0, n0, tid);
      gemm_loads_next(&loads, lda, ldb);
    }
    cp_commit();
  }

#if PIPE
  // Fragments double-buffered across k steps: a step's ldmatrix reads are issued before the
  // previous step's mma, and the next slice's first ones before this slice's last mma (after the
  // barrier that makes the slice visible), so the reads' latency hides under arithmetic.
  // The buffer of a k step is its parity over the whole K walk, so with one step a slice (BK 16)
  // the slices go two at a time to keep every index a constant.
  uint af[2][MI][4], bf[2][NI][2];
#define PAIRS (KSTEPS % 2 == 1 ? 2 : 1)
  CP_WAIT(STAGES - 2);
  barrier(CLK_LOCAL_MEM_FENCE);
  gemm_frags(af[0], bf[0], a_stages, b_stages, 0, wm, wn, lane);
  for (int kp = 0; kp < slices; kp += PAIRS) {
#pragma unroll
    for (int within = 0; within < PAIRS; ++within) {
      const int kt = kp + within;
      if (kt < slices) {
        const int cur = kt % STAGES;
#pragma unroll
        for (int step = 0; step < KSTEPS; ++step) {
          const int buf = (within * KSTEPS + step) & 1, nb = buf ^ 1;
          if (step == 0) {
            // Into the buffer of slice kt - 1, whose fragments every warp read before the last
            // barrier; issued ahead of this slice's barrier, so that the wait there counts it.
            const int next = kt + STAGES - 1;
            if (next < slices) {
              gemm_load_slice(a_stages, b_stages, next, loads, A, B, M, N, K, lda, ldb, m0, n0, tid);
              gemm_loads_next(&loads, lda, ldb);
            }
            cp_commit();
          }
          if (step == KSTEPS - 1) {
            // Slice kt + 1 has landed, and every warp has read its last fragments of slice kt's
            // buffer, which the next slice refills.
            CP_WAIT(STAGES - 2);
            barrier(CLK_LOCAL_MEM_FENCE);
          }
          if (step + 1 < KSTEPS)
            gemm_frags(af[nb], bf[nb], a_stages + cur * A_TILE * 2, b_stages + cur * B_TILE * 2, (step + 1) * 16, wm,
                       wn, lane);
          else if (kt + 1 < slices)
            gemm_frags(af[nb], bf[nb], a_stages + ((kt + 1) % STAGES) * A_TILE * 2,
                       b_stages + ((kt + 1) % STAGES) * B_TILE * 2, 0, wm, wn, lane);
          gemm_multiply(acc, af[buf], bf[buf]);
        }
      }
    }
  }
#undef PAIRS
#else
  for (int kt = 0; kt < slices; ++kt) {
    CP_WAIT(STAGES - 2);
    barrier(CLK_LOCAL_MEM_FENCE);
    // The slice STAGES - 1 ahead goes into the buffer every warp finished with last iteration.
    const int next = kt + STAGES - 1;
    if (next < slices) {
      gemm_load_slice(a_stages, b_stages, next, loads, A, B, M, N, K, lda, ldb, m0, n0, tid);
      gemm_loads_next(&loads, lda, ldb);
    }
    cp_commit();
    const uint as = a_stages + (kt % STAGES) * A_TILE * 2, bs = b_stages + (kt % STAGES) * B_TILE * 2;
#pragma unroll
    for (int step = 0; step < KSTEPS; ++step) {
      uint af[MI][4], bf[NI][2];
      gemm_frags(af, bf, as, bs, step * 16, wm, wn, lane);
      gemm_multiply(acc, af, bf);
    }
  }
#endif
  CP_WAIT(0);
}

// C[m, n] = alpha acc + beta C[m, n] (beta 0: C is not read) over the tile at (m0, n0), rows
// below M and columns below N; C's rows ldc elements apart. c0 c1: row g, columns 2t and 2t + 1;
// c2 c3: row g + 8. Pairs go out as one word where `pairs` says C's rows keep them word-aligned.
void gemm_store(float acc[MI][NI][4], __global EJK_ELEM(GEMM_ST)* C, int ldc, int M, int N, int m0, int n0,
                float alpha, float beta, bool pairs) {
  const int lane = get_local_id(0) & 31, warp = get_local_id(0) >> 5;
  const int wm = warp / WN, wn = warp % WN, g = lane >> 2, t = lane & 3;
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
          v0 += beta * EJK_LD(GEMM_ST, C, o);
          if (n + 1 < N) v1 += beta * EJK_LD(GEMM_ST, C, o + 1);
        }
        if (n + 1 < N && pairs) {
          ((__global uint*)C)[o / 2] = pack2(v0, v1);
        } else {
          EJK_ST(GEMM_ST, C, o, v0);
          if (n + 1 < N) EJK_ST(GEMM_ST, C, o + 1, v1);
        }
      }
}

#endif
