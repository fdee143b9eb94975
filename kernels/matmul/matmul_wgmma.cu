// matmul on Hopper's warpgroup tensor cores (sm_90a): C = alpha * op(A) op(B) + beta * C in f16
// or bf16, or in f32 read as TF32 (A K-major, B transposed), with f32 accumulation, on the shared
// TMA + wgmma GEMM (common/gemm_wgmma.cuh). A's and B's K slices come as one box of K-major rows
// or as 64 x 64 boxes of an M- or N-major operand; TMA zero-fills past the matrix edges.
//
// Build options (kernels/matmul/cuda.cpp): BM BN CW STAGES GROUP_M TRANS_A TRANS_B BF16 TF32.

#include "common/gemm_wgmma.cuh"

// The copies of K slice `k0` into stage buffers `as`, `bs`, completing on `bar`. A's map has
// dimensions (K, M) when stored K-major, (M, K) otherwise, and the batch third; B's likewise.
__device__ __forceinline__ void load_slice(unsigned as, unsigned bs, unsigned bar, const TensorMap* a_map,
                                           const TensorMap* b_map, int m0, int n0, int k0, int za, int zb) {
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
                   int K, float alpha, float beta, int a_batched, int b_batched, out_t* __restrict__ C, int ldc,
                   long long stride_c) {
  extern __shared__ unsigned char smem_raw[];
  const GemmRing ring = gemm_ring(smem_raw);
  int tm, tn;
  gemm_tile_order(blockIdx.x, ceil_div(M, BM), ceil_div(N, BN), tm, tn);
  const int m0 = tm * BM, n0 = tn * BN, batch = blockIdx.z;
  const int slices = ceil_div(K, BK);

  if (threadIdx.x < 128) {
    if (threadIdx.x == 0) {
      tma_prefetch_map(&a_map);
      tma_prefetch_map(&b_map);
    }
    const int za = a_batched ? batch : 0, zb = b_batched ? batch : 0;
    gemm_produce(ring, slices, [&](int kt, unsigned as, unsigned bs, unsigned bar) {
      load_slice(as, bs, bar, &a_map, &b_map, m0, n0, kt * BK, za, zb);
    });
    return;
  }
  const int c = threadIdx.x / 128 - 1;
  float d[MT][BN / 2];
  gemm_consume(ring, c, slices, d, [](int) { return 64; });
  gemm_store(d, c, C + batch * stride_c, ldc, m0, n0, M, N, alpha, beta, (ldc & 1) == 0 && (stride_c & 1) == 0);
}
