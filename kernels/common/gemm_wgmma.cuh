// The Hopper (sm_90a) GEMM that matmul and grouped_matmul share: a block computes a BM x BN tile
// of C = op(A) op(B) in f32. Its first warpgroup is the producer: one thread issues the TMA
// copies of 64-wide K slices of A and B into a STAGES-deep ring of 128-byte swizzled shared
// buffers, each stage guarded by a "full" barrier (the copies' bytes landed) and an "empty" one
// (every consumer warp is done with it). The CW consumer warpgroups each own BM / CW rows of the
// tile as m64 strips and multiply with wgmma.mma_async m64nBNk16 straight from shared memory,
// keeping one slice's wgmmas in flight while the next slice's are issued. The producer hands its
// registers to the consumers (setmaxnreg). Operands stored M- or N-major (TRANS_A set, TRANS_B
// not) arrive as 64 x 64 boxes read with wgmma's transpose bit, so all four layouts take the same
// path. With TF32 the operands are f32, read as TF32 by wgmma m64nNk8 (which takes K-major
// operands only: TRANS_A 0, TRANS_B 1) and C is f32. A slice is 128 bytes of K either way (64
// 16-bit or 32 f32 elements), so the K-major layouts and descriptors are the same. A kernel
// supplies where its slices come from (the copies) and where its tile goes.
//
// Build options: BM BN CW STAGES TRANS_A TRANS_B BF16 TF32.
#pragma once
#include "common/hopper.cuh"
#include "common/wgmma.cuh"

#if TF32
typedef float out_t;
#define BK 32
static_assert(!TRANS_A && TRANS_B, "wgmma reads TF32 operands K-major only");
#else
typedef elem_t out_t;
#define BK 64
#endif
#define MT (BM / (64 * CW))  // m64 strips a consumer warpgroup computes
#define THREADS ((CW + 1) * 128)
#define A_BYTES (BM * 128)  // a slice: 128 bytes of K a row
#define B_BYTES (BN * 128)
#define STAGE_BYTES (A_BYTES + B_BYTES)
#define BOX_BYTES (64 * 64 * 2)  // one 64 x 64 box of an M- or N-major operand

// Shared addresses of the ring; the launch asks for gemm_shared_bytes (cuda side: 1 KiB of
// slack, so that the swizzled buffers start on 1024-byte boundaries).
struct GemmRing {
  unsigned a, b, full, empty;
  __device__ __forceinline__ unsigned a_stage(int s) const { return a + s * A_BYTES; }
  __device__ __forceinline__ unsigned b_stage(int s) const { return b + s * B_BYTES; }
};

// Lays the ring out in `smem` and initialises its barriers; every thread of the block calls it.
__device__ __forceinline__ GemmRing gemm_ring(unsigned char* smem) {
  GemmRing r;
  r.a = (shared_addr(smem) + 1023u) & ~1023u;
  r.b = r.a + STAGES * A_BYTES;
  r.full = r.b + STAGES * B_BYTES;
  r.empty = r.full + 8 * STAGES;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(r.full + 8 * s, 1);
      mbar_init(r.empty + 8 * s, CW * 4);
    }
    mbar_fence_init();
  }
  __syncthreads();
  return r;
}

// The producer warpgroup's part: `load(kt, a, b, bar)` issues slice kt's copies into stage
// buffers a and b, expecting STAGE_BYTES on `bar`. Returns when every copy is issued.
template <class Load>
__device__ __forceinline__ void gemm_produce(const GemmRing& r, int slices, Load load) {
#if CW > 1
  regs_release<40>();
#endif
  if (threadIdx.x != 0) return;
  for (int kt = 0; kt < slices; ++kt) {
    const int s = kt % STAGES;
    if (kt >= STAGES) mbar_wait(r.empty + 8 * s, ((kt / STAGES) - 1) & 1);
    mbar_expect(r.full + 8 * s, STAGE_BYTES);
    load(kt, r.a_stage(s), r.b_stage(s), r.full + 8 * s);
  }
}

// Rows `from`..63 of every 64-row box of a stage buffer, set to zero (the rows of a reduction
// slice that belong to no product): a box row is 128 bytes whatever its swizzle.
__device__ __forceinline__ void gemm_zero_rows(unsigned buf, int boxes, int from, int tid, int threads) {
  const int chunks = (64 - from) * 8;
  for (int i = tid; i < boxes * chunks; i += threads) {
    const unsigned at = buf + (i / chunks) * BOX_BYTES + (from * 8 + i % chunks) * 16;
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(at), "r"(0) : "memory");
  }
}

// Consumer warpgroup c's part: d, its MT m64 strips of the tile, accumulated over `slices`.
// `valid(kt)` is how many of slice kt's 64 rows of K take part (64 but where a reduction ends
// inside a slice, whose other rows are zeroed first: only M- or N-major operands, whose boxes
// hold K in rows).
template <class Valid>
__device__ __forceinline__ void gemm_consume(const GemmRing& r, int c, int slices, float (&d)[MT][BN / 2],
                                             Valid valid) {
#if CW > 1
  regs_take<232>();
#endif
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < BN / 2; ++j) d[i][j] = 0.0f;
  const int tid = threadIdx.x % 128;
  for (int kt = 0; kt < slices; ++kt) {
    const int s = kt % STAGES;
    mbar_wait(r.full + 8 * s, (kt / STAGES) & 1);
    const unsigned as = r.a_stage(s), bs = r.b_stage(s);
    const int rows = valid(kt);
    if (rows < 64) {
      gemm_zero_rows(as, BM / 64, rows, c * 128 + tid, CW * 128);
      gemm_zero_rows(bs, BN / 64, rows, c * 128 + tid, CW * 128);
      // The zeros, written by the generic proxy, before wgmma reads them through the async one.
      asm volatile("fence.proxy.async.shared::cta;\nbar.sync 1, %0;\n" ::"n"(CW * 128) : "memory");
    }
    wgmma_fence();
    // Four k-steps of 32 bytes: k16 on 16-bit operands, k8 on TF32.
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#if TRANS_B
      const unsigned long long db = smem_desc(bs + kk * 32, 16, 1024);
#else
      const unsigned long long db = smem_desc(bs + kk * 2048, BOX_BYTES, 1024);
#endif
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        const int strip = c * MT + i;
#if TRANS_A
        const unsigned long long da = smem_desc(as + strip * BOX_BYTES + kk * 2048, BOX_BYTES, 1024);
#else
        const unsigned long long da = smem_desc(as + strip * 64 * 128 + kk * 32, 16, 1024);
#endif
#if TF32
        WgmmaTf32<BN>::run(d[i], da, db, 1);
#else
        Wgmma<BN, TRANS_A, !TRANS_B>::run(d[i], da, db, 1);
#endif
      }
    }
    wgmma_commit();
    // The previous slice's wgmmas are done once at most this one is in flight: free its stage.
    wgmma_wait<1>();
#pragma unroll
    for (int i = 0; i < MT; ++i) wgmma_hold(d[i]);
    if (kt > 0 && tid % 32 == 0) mbar_arrive(r.empty + 8 * ((kt - 1) % STAGES));
  }
  wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < MT; ++i) wgmma_hold(d[i]);
}

// C[m0.., n0..] = alpha * d + beta * C for the rows below `rows` and columns below `cols` of C
// (ldc elements a row; `pairs` where two neighbouring elements may be written as one word).
__device__ __forceinline__ void gemm_store(const float (&d)[MT][BN / 2], int c, out_t* C, long long ldc, int m0,
                                           int n0, int rows, int cols, float alpha, float beta, bool pairs) {
  // Accumulator layout of m64nN: warp w holds rows 16w + g and 16w + g + 8 (g = lane / 4), and
  // of every 8 columns the pair 2t, 2t + 1 (t = lane % 4): d[4j + 2h + e] is row 16w + g + 8h,
  // column 8j + 2t + e.
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = m0 + (c * MT + i) * 64 + warp * 16 + g + 8 * h;
      if (m >= rows) continue;
      out_t* row = C + static_cast<long long>(m) * ldc;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        const int n = n0 + 8 * j + 2 * t;
        if (n >= cols) continue;
        const float v0 = alpha * d[i][4 * j + 2 * h], v1 = alpha * d[i][4 * j + 2 * h + 1];
        if (n + 1 < cols && pairs) {
          put2(row + n, v0, v1, beta);
        } else {
          put1(row + n, v0, beta);
          if (n + 1 < cols) put1(row + n + 1, v1, beta);
        }
      }
    }
}

// The block's tile in a grid of tiles_m x tiles_n visited GROUP_M rows of tiles at a time, column
// by column, so that the B panels a group of rows shares stay in L2.
__device__ __forceinline__ void gemm_tile_order(int id, int tiles_m, int tiles_n, int& tm, int& tn) {
  const int in_group = GROUP_M * tiles_n;
  const int first_m = (id / in_group) * GROUP_M;
  const int group_rows = min(tiles_m - first_m, GROUP_M);
  tm = first_m + (id % in_group) % group_rows;
  tn = (id % in_group) / group_rows;
}
