// grouped_matmul and grouped_matmul_tgmm on Hopper's warpgroup tensor cores (sm_90a), f16 or bf16
// with f32 accumulation, on the shared TMA + wgmma GEMM (common/gemm_wgmma.cuh).
//   gmm   a block is (row-tile slot, column tile): slot s is the s-th BM-row tile counting
//         through the groups in order (a tile never straddles two groups); its rows of lhs come
//         by TMA from the group's first row on (rows past the group are multiplied but not
//         stored), its K slices of rhs[g] from a map with the group as third dimension.
//   tgmm  a block is (BM x BN tile of out[g], group g): out[g] = lhs_g^T grad_g reduced over the
//         group's rows 64 at a time, both operands as 64 x 64 boxes whose rows are the group's
//         rows; the rows of a last slice past the group's end are zeroed before it is multiplied.
//         An empty group stores zeros.
// The blocks find their group from group_sizes on the device (nothing is read back), with sizes
// clamped as grouped_matmul.hpp says, so nothing is written outside out.
//
// Build options (kernels/grouped_matmul/cuda.cpp): BM BN CW STAGES GROUP_M TGMM TRANS_RHS BF16.

#if TGMM
#define TRANS_A 1
#define TRANS_B 0
#else
#define TRANS_A 0
#define TRANS_B TRANS_RHS
#endif
#include "common/gemm_wgmma.cuh"

// A warp's inclusive prefix sum over its lanes.
__device__ __forceinline__ long long warp_scan(long long v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const long long u = __shfl_up_sync(~0u, v, o);
    if (lane >= o) v += u;
  }
  return v;
}

// Group h's rows [start, end) of m: with P_h the sum of the non-negative sizes before h,
// start = min(P_h, m) and end = min(P_h + size_h, m), 32 groups a step.
struct GroupRows {
  int group, start, end;
};

// The group holding the `slot`-th tile of BM rows, and that tile's first row in `start`; group
// -1 where there are fewer tiles (a surplus slot). Every lane of a warp returns the same.
__device__ __forceinline__ GroupRows slot_rows(const int* sizes, int groups, int m, int slot) {
  const int lane = threadIdx.x & 31;
  long long off = 0;
  for (int base = 0; base < groups; base += 32) {
    const int h = base + lane;
    const long long size = h < groups ? max(sizes[h], 0) : 0;
    const long long incl = warp_scan(size);
    const int start = static_cast<int>(min(off + incl - size, static_cast<long long>(m)));
    const int end = static_cast<int>(min(off + incl, static_cast<long long>(m)));
    const int tiles = ceil_div(end - start, BM);
    const int tiles_incl = static_cast<int>(warp_scan(tiles));
    const unsigned hit = __ballot_sync(~0u, slot >= tiles_incl - tiles && slot < tiles_incl);
    if (hit) {
      const int l = __ffs(hit) - 1;
      const int before = __shfl_sync(~0u, tiles_incl - tiles, l);
      return {base + l, __shfl_sync(~0u, start, l) + (slot - before) * BM, __shfl_sync(~0u, end, l)};
    }
    slot -= __shfl_sync(~0u, tiles_incl, 31);
    off = min(off + __shfl_sync(~0u, incl, 31), static_cast<long long>(m));
  }
  return {-1, 0, 0};
}

// Group g's rows. Every lane of a warp returns the same.
__device__ __forceinline__ GroupRows group_rows(const int* sizes, int m, int g) {
  const int lane = threadIdx.x & 31;
  long long before = 0;
  for (int base = 0; base < g; base += 32) {
    long long v = base + lane < g ? max(sizes[base + lane], 0) : 0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(~0u, v, o);
    before += v;
  }
  const long long start = min(before, static_cast<long long>(m));
  return {g, static_cast<int>(start), static_cast<int>(min(start + max(sizes[g], 0), static_cast<long long>(m)))};
}

#if !TGMM
// lhs_map: lhs as (k, m, 1), boxes of 64 x BM; rhs_map: rhs as (n, k, groups) in 64 x 64 boxes,
// or with TRANS_RHS as (k, n, groups) in boxes of 64 x BN.
extern "C" __global__ void __launch_bounds__(THREADS, 1)
    ejk_gmm_wgmma(const __grid_constant__ TensorMap lhs_map, const __grid_constant__ TensorMap rhs_map,
                  const int* __restrict__ sizes, int m, int n, int k, int groups, elem_t* __restrict__ out) {
  extern __shared__ unsigned char smem_raw[];
  int slot, tn;
  gemm_tile_order(blockIdx.x, ceil_div(m, BM) + groups, ceil_div(n, BN), slot, tn);
  const GroupRows tile = slot_rows(sizes, groups, m, slot);
  if (tile.group < 0) return;  // the whole block: before any barrier
  const GemmRing ring = gemm_ring(smem_raw);
  const int row0 = tile.start, n0 = tn * BN, g = tile.group;
  const int slices = ceil_div(k, BK);
  if (threadIdx.x < 128) {
    if (threadIdx.x == 0) {
      tma_prefetch_map(&lhs_map);
      tma_prefetch_map(&rhs_map);
    }
    gemm_produce(ring, slices, [&](int kt, unsigned as, unsigned bs, unsigned bar) {
      tma_load_3d(as, &lhs_map, bar, kt * BK, row0, 0);
#if TRANS_B
      tma_load_3d(bs, &rhs_map, bar, kt * BK, n0, g);
#else
#pragma unroll
      for (int j = 0; j < BN / 64; ++j) tma_load_3d(bs + j * BOX_BYTES, &rhs_map, bar, n0 + 64 * j, kt * BK, g);
#endif
    });
    return;
  }
  const int c = threadIdx.x / 128 - 1;
  float d[MT][BN / 2];
  gemm_consume(ring, c, slices, d, [](int) { return 64; });
  gemm_store(d, c, out, n, row0, n0, tile.end, n, 1.0f, 0.0f, (n & 1) == 0);
}
#else
// lhs_map: lhs as (k, m, 1), grad_map: grad as (n, m, 1), both in 64 x 64 boxes. Grid: (tiles of
// out[g] in GROUP_M order, 1, groups).
extern "C" __global__ void __launch_bounds__(THREADS, 1)
    ejk_tgmm_wgmma(const __grid_constant__ TensorMap lhs_map, const __grid_constant__ TensorMap grad_map,
                   const int* __restrict__ sizes, int m, int n, int k, elem_t* __restrict__ out) {
  extern __shared__ unsigned char smem_raw[];
  int tm, tn;
  gemm_tile_order(blockIdx.x, ceil_div(k, BM), ceil_div(n, BN), tm, tn);
  const int i0 = tm * BM, n0 = tn * BN, g = blockIdx.z;
  const GroupRows rows = group_rows(sizes, m, g);
  const GemmRing ring = gemm_ring(smem_raw);
  const int count = rows.end - rows.start, slices = ceil_div(count, BK);
  if (threadIdx.x < 128) {
    if (threadIdx.x == 0) {
      tma_prefetch_map(&lhs_map);
      tma_prefetch_map(&grad_map);
    }
    gemm_produce(ring, slices, [&](int kt, unsigned as, unsigned bs, unsigned bar) {
      const int r0 = rows.start + kt * BK;
#pragma unroll
      for (int j = 0; j < BM / 64; ++j) tma_load_3d(as + j * BOX_BYTES, &lhs_map, bar, i0 + 64 * j, r0, 0);
#pragma unroll
      for (int j = 0; j < BN / 64; ++j) tma_load_3d(bs + j * BOX_BYTES, &grad_map, bar, n0 + 64 * j, r0, 0);
    });
    return;
  }
  const int c = threadIdx.x / 128 - 1;
  float d[MT][BN / 2];
  gemm_consume(ring, c, slices, d, [&](int kt) { return min(BK, count - kt * BK); });
  gemm_store(d, c, out + static_cast<long long>(g) * k * n, n, i0, n0, k, n, 1.0f, 0.0f, (n & 1) == 0);
}
#endif
