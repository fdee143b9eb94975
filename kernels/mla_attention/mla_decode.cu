// mla_decode's attention pass on NVIDIA tensor cores (sm_80 and later), f16 or bf16 cache: the
// counterpart of mla_decode.cl's mla_attend, with the same inputs (the absorbed, scaled queries
// qs in f32) and outputs (each part's unnormalised o_lat and its running max and sum, log2
// domain), so mla_absorb and mla_combine run around it unchanged.
//
// A block of four warps takes one part of the context of one sequence for 16 heads (the m16 of
// mma.sync; heads past the last are zero rows). Tiles of BN cache rows are copied by cp.async
// into a double buffer and serve all 16 heads: the heads are the rows of S = Q C^T (each warp a
// quarter of the tile's tokens, over the whole latent width) and of O += P C[:, :RANK] (each warp a
// quarter of the latent columns), so the cache is read once per block, as FlashMLA reads it.
//
// Build options (kernels/mla_attention/cuda.cpp): RANK ROPE BN BF16.

#include "common/cuda.cuh"

#define WIDTH (RANK + ROPE)
#define ROW (WIDTH + 8)  // shared row stride in elements: 16 bytes of padding spread ldmatrix's rows
#define P_ROW (BN + 8)
#define WARPS 4
#define NT_S (BN / WARPS / 8)      // n8 tiles of scores a warp
#define NT_O (RANK / WARPS / 8)    // n8 tiles of o_lat a warp
#define CHUNKS (WIDTH / 8)         // 16-byte chunks a cache row

// Rows [t0, t0 + BN) of the sequence's cache (within one page) into `dst`, zeros past `end`.
__device__ __forceinline__ void load_tile(elem_t* dst, const elem_t* kv, const int* table, int block_size, int t0,
                                          int end) {
  const long long base = (static_cast<long long>(table[t0 / block_size]) * block_size + t0 % block_size) * WIDTH;
  for (int c = threadIdx.x; c < BN * CHUNKS; c += WARPS * 32) {
    const int r = c / CHUNKS, col = (c % CHUNKS) * 8;
    const bool in = t0 + r < end;
    cp16(dst + r * ROW + col, in ? kv + base + static_cast<long long>(r) * WIDTH + col : kv, in ? 16 : 0);
  }
}

extern "C" __global__ void __launch_bounds__(WARPS * 32)
    ejk_mla_attend_mma(const float* __restrict__ qs, const elem_t* __restrict__ kv, const int* __restrict__ block_tables,
                       const int* __restrict__ context_lens, float* __restrict__ part_o, float* __restrict__ part_ml,
                       int heads, int block_size, int max_blocks, int splits) {
  extern __shared__ __align__(16) unsigned char smem[];
  elem_t* const q_s = reinterpret_cast<elem_t*>(smem);  // 16 x ROW
  elem_t* const kv_s = q_s + 16 * ROW;                  // 2 x BN x ROW
  elem_t* const p_s = kv_s + 2 * BN * ROW;              // 16 x P_ROW
  float* const red = reinterpret_cast<float*>(p_s + 16 * P_ROW);  // [2][WARPS][16]: maxima, sums

  const int split = blockIdx.x, h0 = blockIdx.y * 16, b = blockIdx.z;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int* table = block_tables + static_cast<long long>(b) * max_blocks;

  for (int e = tid; e < 16 * WIDTH; e += WARPS * 32) {
    const int r = e / WIDTH, c = e % WIDTH;
    const float x = h0 + r < heads ? qs[(static_cast<long long>(b) * heads + h0 + r) * WIDTH + c] : 0.0f;
    q_s[r * ROW + c] = static_cast<elem_t>(pack2(x, 0.0f) & 0xffffu);
  }

  const int n = context_lens[b];
  const int per = (n + splits - 1) / splits;
  const int chunk = (per + BN - 1) / BN * BN;
  const int start = min(n, split * chunk), end = min(n, start + chunk);
  const int tiles = (end - start + BN - 1) / BN;

  float acc[NT_O][4];
#pragma unroll
  for (int j = 0; j < NT_O; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
  // This thread's heads: rows g and g + 8 of the block.
  float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.0f, l1 = 0.0f;

  if (tiles > 0) load_tile(kv_s, kv, table, block_size, start, end);
  cp_commit();
  for (int i = 0; i < tiles; ++i) {
    const int t0 = start + i * BN;
    elem_t* const cur = kv_s + (i % 2) * BN * ROW;
    if (i + 1 < tiles) load_tile(kv_s + ((i + 1) % 2) * BN * ROW, kv, table, block_size, t0 + BN, end);
    cp_commit();
    cp_wait<1>();
    __syncthreads();

    // S: 16 heads x this warp's NT_S * 8 tokens, over the whole width.
    float s[NT_S][4];
#pragma unroll
    for (int j = 0; j < NT_S; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
#pragma unroll 4
    for (int k = 0; k < WIDTH; k += 16) {
      unsigned a[4];
      ldsm_x4(a, q_s + (lane & 15) * ROW + k + ((lane >> 4) << 3));
#pragma unroll
      for (int j = 0; j < NT_S; ++j) {
        unsigned bf[2];
        const int tok = (warp * NT_S + j) * 8 + (lane & 7);
        ldsm_x2(bf, cur + tok * ROW + k + (((lane >> 3) & 1) << 3));
        mma(s[j], a, bf[0], bf[1]);
      }
    }

    // Online softmax over the tile: maxima and sums across the warps through shared memory.
    float x0 = NEG_INF, x1 = NEG_INF;
#pragma unroll
    for (int j = 0; j < NT_S; ++j) {
      const int tok = t0 + (warp * NT_S + j) * 8 + 2 * t;
      if (tok >= end) s[j][0] = s[j][2] = NEG_INF;
      if (tok + 1 >= end) s[j][1] = s[j][3] = NEG_INF;
      x0 = fmaxf(x0, fmaxf(s[j][0], s[j][1]));
      x1 = fmaxf(x1, fmaxf(s[j][2], s[j][3]));
    }
#pragma unroll
    for (int o = 1; o <= 2; o *= 2) {
      x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, o));
      x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, o));
    }
    if (t == 0) {
      red[warp * 16 + g] = x0;
      red[warp * 16 + g + 8] = x1;
    }
    __syncthreads();
    float n0 = m0, n1 = m1;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      n0 = fmaxf(n0, red[w * 16 + g]);
      n1 = fmaxf(n1, red[w * 16 + g + 8]);
    }
    const float b0 = n0 == NEG_INF ? 0.0f : n0, b1 = n1 == NEG_INF ? 0.0f : n1;
    const float a0 = fast_exp2(m0 - b0), a1 = fast_exp2(m1 - b1);
    m0 = n0;
    m1 = n1;
    float y0 = 0.0f, y1 = 0.0f;
#pragma unroll
    for (int j = 0; j < NT_S; ++j) {
      const float p0 = fast_exp2(s[j][0] - b0), p1 = fast_exp2(s[j][1] - b0);
      const float p2 = fast_exp2(s[j][2] - b1), p3 = fast_exp2(s[j][3] - b1);
      y0 += p0 + p1;
      y1 += p2 + p3;
      const int col = (warp * NT_S + j) * 8 + 2 * t;
      *reinterpret_cast<unsigned*>(p_s + g * P_ROW + col) = pack2(p0, p1);
      *reinterpret_cast<unsigned*>(p_s + (g + 8) * P_ROW + col) = pack2(p2, p3);
    }
#pragma unroll
    for (int o = 1; o <= 2; o *= 2) {
      y0 += __shfl_xor_sync(0xffffffffu, y0, o);
      y1 += __shfl_xor_sync(0xffffffffu, y1, o);
    }
    if (t == 0) {
      red[WARPS * 16 + warp * 16 + g] = y0;
      red[WARPS * 16 + warp * 16 + g + 8] = y1;
    }
    __syncthreads();
    float z0 = 0.0f, z1 = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      z0 += red[WARPS * 16 + w * 16 + g];
      z1 += red[WARPS * 16 + w * 16 + g + 8];
    }
    l0 = l0 * a0 + z0;
    l1 = l1 * a1 + z1;

    // O += P V, V the tile's first RANK columns, this warp's quarter of them.
#pragma unroll
    for (int j = 0; j < NT_O; ++j) {
      acc[j][0] *= a0;
      acc[j][1] *= a0;
      acc[j][2] *= a1;
      acc[j][3] *= a1;
    }
#pragma unroll
    for (int k = 0; k < BN; k += 16) {
      unsigned a[4];
      ldsm_x4(a, p_s + (lane & 15) * P_ROW + k + ((lane >> 4) << 3));
#pragma unroll
      for (int j = 0; j < NT_O; j += 2) {
        unsigned r4[4];
        const int col = warp * (RANK / WARPS) + j * 8;
        // Stored [token][column]: matrices (tokens 0-7, 8-15) x (columns 0-7, 8-15), transposed.
        ldsm_x4_t(r4, cur + (k + (lane & 7) + (((lane >> 3) & 1) << 3)) * ROW + col + ((lane >> 4) << 3));
        mma(acc[j], a, r4[0], r4[1]);
        mma(acc[j + 1], a, r4[2], r4[3]);
      }
    }
    // Every warp is done with this buffer, the scores' scratch and P before they are refilled.
    __syncthreads();
  }
  cp_wait<0>();

#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int h = h0 + g + 8 * half;
    if (h >= heads) continue;
    const long long slot = (static_cast<long long>(b) * heads + h) * splits + split;
    float* o = part_o + slot * RANK + warp * (RANK / WARPS) + 2 * t;
#pragma unroll
    for (int j = 0; j < NT_O; ++j) *reinterpret_cast<float2*>(o + 8 * j) = make_float2(acc[j][2 * half], acc[j][2 * half + 1]);
    if (warp == 0 && t == 0) {
      part_ml[slot * 2] = half ? m1 : m0;
      part_ml[slot * 2 + 1] = half ? l1 : l0;
    }
  }
}
