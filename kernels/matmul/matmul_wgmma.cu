// matmul on Hopper's warpgroup tensor cores (sm_90a): C = alpha * op(A) op(B) + beta * C in f16
// or bf16 with f32 accumulation. A block computes a BM x BN tile of C. Its first warpgroup is the
// producer: one thread issues TMA copies of 64-wide K slices of A and B into a STAGES-deep ring
// of 128-byte swizzled shared buffers, each stage guarded by a "full" barrier (the copies'
// bytes landed) and an "empty" one (every consumer warp is done with it). The CW consumer
// warpgroups each own BM / CW rows of the tile as m64 strips and multiply with
// wgmma.mma_async m64nBNk16 straight from shared memory, keeping one slice's wgmmas in flight
// while the next slice's are issued. The producer hands its registers to the consumers
// (setmaxnreg). Operands stored M- or N-major (A transposed, B not) are copied as 64 x 64 boxes
// and read with wgmma's transpose bit, so all four layouts take the same path; TMA zero-fills past
// the matrix edges.
// Blocks run in groups of GROUP_M rows of tiles, so the B panels a group shares stay in L2.
//
// Build options (kernels/matmul/cuda.cpp): BM BN CW STAGES GROUP_M TRANS_A TRANS_B BF16.

#include "common/hopper.cuh"
#include "common/wgmma.cuh"

#define BK 64
#define MT (BM / (64 * CW))  // m64 strips a consumer warpgroup computes
#define THREADS ((CW + 1) * 128)
#define A_BYTES (BM * BK * 2)
#define B_BYTES (BN * BK * 2)
#define STAGE_BYTES (A_BYTES + B_BYTES)
#define BOX_BYTES (64 * 64 * 2)  // one 64 x 64 box of an M- or N-major operand

// The copies of K slice `k0` into stage buffers `as`, `bs`, completing on `bar`. A's map has
// dimensions (K, M) when stored K-major, (M, K) otherwise, and the batch third; B's likewise.
__device__ __forceinline__ void load_slice(unsigned as, unsigned bs, unsigned bar, const TensorMap* a_map,
                                           const TensorMap* b_map, int m0, int n0, int k0, int za, int zb) {
  mbar_expect(bar, STAGE_BYTES);
#if TRANS_A
#pragma unroll
  for (int j = 0; j < BM / 64; ++j) tma_load_3d(as + j * BOX_BYTES, a_map, bar, m0 + 64 * j, k0, za);
#else
  tma_load_3d(as, a_map, bar, k0, m0, za);
#endif
#if TRANS_B
  tma_load_3d(bs, b_map, bar, k0, n0, zb);
#else
#pragma unroll
  for (int j = 0; j < BN / 64; ++j) tma_load_3d(bs + j * BOX_BYTES, b_map, bar, n0 + 64 * j, k0, zb);
#endif
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    ejk_gemm_wgmma(const __grid_constant__ TensorMap a_map, const __grid_constant__ TensorMap b_map, int M, int N,
                   int K, float alpha, float beta, int a_batched, int b_batched, elem_t* __restrict__ C, int ldc,
                   long long stride_c) {
  extern __shared__ unsigned char smem_raw[];
  // Swizzled buffers start on 1024-byte boundaries (the launch asks for 1 KiB of slack).
  const unsigned base = (shared_addr(smem_raw) + 1023u) & ~1023u;
  const unsigned a_stages = base, b_stages = base + STAGES * A_BYTES;
  const unsigned full = b_stages + STAGES * B_BYTES, empty = full + 8 * STAGES;

  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const int id = blockIdx.x, in_group = GROUP_M * tiles_n;
  const int first_m = (id / in_group) * GROUP_M;
  const int group_rows = min(tiles_m - first_m, GROUP_M);
  const int m0 = (first_m + (id % in_group) % group_rows) * BM, n0 = ((id % in_group) / group_rows) * BN;
  const int batch = blockIdx.z;

  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, CW * 4);
    }
    mbar_fence_init();
  }
  __syncthreads();

  const int slices = (K + BK - 1) / BK;
  if (wg == 0) {
#if CW > 1
    regs_release<40>();
#endif
    if (tid == 0) {
      tma_prefetch_map(&a_map);
      tma_prefetch_map(&b_map);
      const int za = a_batched ? batch : 0, zb = b_batched ? batch : 0;
      for (int kt = 0; kt < slices; ++kt) {
        const int s = kt % STAGES;
        if (kt >= STAGES) mbar_wait(empty + 8 * s, ((kt / STAGES) - 1) & 1);
        load_slice(a_stages + s * A_BYTES, b_stages + s * B_BYTES, full + 8 * s, &a_map, &b_map, m0, n0, kt * BK, za,
                   zb);
      }
    }
    return;
  }

#if CW > 1
  regs_take<232>();
#endif
  const int c = wg - 1;  // consumer index
  float d[MT][BN / 2];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < BN / 2; ++j) d[i][j] = 0.0f;

  for (int kt = 0; kt < slices; ++kt) {
    const int s = kt % STAGES;
    mbar_wait(full + 8 * s, (kt / STAGES) & 1);
    const unsigned as = a_stages + s * A_BYTES, bs = b_stages + s * B_BYTES;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
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
        Wgmma<BN, TRANS_A, !TRANS_B>::run(d[i], da, db, 1);
      }
    }
    wgmma_commit();
    // The previous slice's wgmmas are done once at most this one is in flight: free its stage.
    wgmma_wait<1>();
#pragma unroll
    for (int i = 0; i < MT; ++i) wgmma_hold(d[i]);
    if (kt > 0 && tid % 32 == 0) mbar_arrive(empty + 8 * ((kt - 1) % STAGES));
  }
  wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < MT; ++i) wgmma_hold(d[i]);

  // Accumulator layout of m64nN: warp w holds rows 16w + g and 16w + g + 8 (g = lane / 4), and
  // of every 8 columns the pair 2t, 2t + 1 (t = lane % 4): d[4j + 2h + e] is row 16w + g + 8h,
  // column 8j + 2t + e.
  C += batch * stride_c;
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const bool pairs = (ldc & 1) == 0 && (stride_c & 1) == 0;
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = m0 + (c * MT + i) * 64 + warp * 16 + g + 8 * h;
      if (m >= M) continue;
      elem_t* row = C + static_cast<long long>(m) * ldc;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        const int n = n0 + 8 * j + 2 * t;
        if (n >= N) continue;
        float v0 = alpha * d[i][4 * j + 2 * h], v1 = alpha * d[i][4 * j + 2 * h + 1];
        elem_t* out = row + n;
        if (n + 1 < N && pairs) {
          if (beta != 0.0f) {
            const unsigned old = *reinterpret_cast<const unsigned*>(out);
            v0 += beta * to_f32(static_cast<elem_t>(old & 0xffffu));
            v1 += beta * to_f32(static_cast<elem_t>(old >> 16));
          }
          *reinterpret_cast<unsigned*>(out) = pack2(v0, v1);
        } else {
          if (beta != 0.0f) v0 += beta * to_f32(out[0]);
          out[0] = to_elem(v0);
          if (n + 1 < N) {
            if (beta != 0.0f) v1 += beta * to_f32(out[1]);
            out[1] = to_elem(v1);
          }
        }
      }
    }
}
