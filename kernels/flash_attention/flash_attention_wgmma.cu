// flash attention forward on Hopper's warpgroup tensor cores (sm_90a), f16 or bf16 with f32
// accumulation. A block takes BQ = 64 * CW query rows of one (sequence, head). Its first
// warpgroup is the producer: one thread copies the Q tile once and then K and V blocks of BK keys
// by TMA into a STAGES-deep ring of 128-byte swizzled buffers (64-wide head_dim chunks), each
// guarded by "full" and "empty" barriers. Each of the CW consumer warpgroups owns 64 query rows:
// S = Q K^T by wgmma from shared memory, the online softmax in registers (base 2, the scale
// folded in), then O += P V by wgmma with P straight from registers (the accumulator layout of S
// is the A fragment layout of P) and V read N-major through the transpose bit. Key blocks
// outside the causal or window band are never loaded; masks are applied only to blocks that
// straddle the band or the end of the keys. Blocks of the longest rows start first.
//
// Build options (kernels/flash_attention/cuda.cpp): D (64, 128) CW BK STAGES SOFTCAP BF16.

#include "common/hopper.cuh"
#include "common/wgmma.cuh"

#define BQ (64 * CW)
#define THREADS ((CW + 1) * 128)
#define CHUNKS (D / 64)               // 64-wide head_dim chunks (one 128-byte swizzled row each)
#define Q_CHUNK (BQ * 128)            // bytes of one chunk of the Q tile
#define KV_CHUNK (BK * 128)           // bytes of one chunk of a K or V block
#define KV_BYTES (CHUNKS * KV_CHUNK)  // one K or V block

// What varies between invocations of one program.
struct Params {
  int seq_q, seq_k, heads, group;   // group: query heads per kv head
  int window_left, window_right;    // -1: unbounded; a causal mask is window_right 0
  int diagonal;                     // seq_k - seq_q + diagonal_offset
  float qscale, cap2;               // logits in base 2 (program_options)
  int has_lse;
};

__device__ __forceinline__ int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    ejk_fa_fwd_wgmma(const __grid_constant__ TensorMap q_map, const __grid_constant__ TensorMap k_map,
                     const __grid_constant__ TensorMap v_map, elem_t* __restrict__ out, float* __restrict__ lse,
                     const Params p) {
  extern __shared__ unsigned char smem_raw[];
  const unsigned base = (shared_addr(smem_raw) + 1023u) & ~1023u;
  const unsigned q_s = base, k_s = q_s + CHUNKS * Q_CHUNK, v_s = k_s + STAGES * KV_BYTES;
  const unsigned q_full = v_s + STAGES * KV_BYTES, k_full = q_full + 8, k_empty = k_full + 8 * STAGES,
                 v_full = k_empty + 8 * STAGES, v_empty = v_full + 8 * STAGES;

  const int q0 = (gridDim.x - 1 - blockIdx.x) * BQ, h = blockIdx.y, b = blockIdx.z, hk = h / p.group;
  // The key blocks some row of the tile may see.
  int k_begin = 0, k_end = ceil_div(p.seq_k, BK);
  if (p.window_left >= 0) k_begin = max(0, q0 + p.diagonal - p.window_left) / BK;
  if (p.window_right >= 0) k_end = min(k_end, floor_div(q0 + BQ - 1 + p.diagonal + p.window_right, BK) + 1);
  const int blocks = max(k_end - k_begin, 0);

  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  if (threadIdx.x == 0) {
    mbar_init(q_full, 1);
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(k_full + 8 * s, 1);
      mbar_init(v_full + 8 * s, 1);
      mbar_init(k_empty + 8 * s, CW * 4);
      mbar_init(v_empty + 8 * s, CW * 4);
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (wg == 0) {
    regs_release<24>();
    if (tid == 0) {
      tma_prefetch_map(&k_map);
      tma_prefetch_map(&v_map);
      mbar_expect(q_full, CHUNKS * Q_CHUNK);
#pragma unroll
      for (int c = 0; c < CHUNKS; ++c) tma_load_4d(q_s + c * Q_CHUNK, &q_map, q_full, 64 * c, h, q0, b);
      for (int n = 0; n < blocks; ++n) {
        const int s = n % STAGES, k0 = (k_begin + n) * BK;
        const unsigned parity = ((n / STAGES) - 1) & 1;
        if (n >= STAGES) mbar_wait(k_empty + 8 * s, parity);
        mbar_expect(k_full + 8 * s, KV_BYTES);
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c)
          tma_load_4d(k_s + s * KV_BYTES + c * KV_CHUNK, &k_map, k_full + 8 * s, 64 * c, hk, k0, b);
        if (n >= STAGES) mbar_wait(v_empty + 8 * s, parity);
        mbar_expect(v_full + 8 * s, KV_BYTES);
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c)
          tma_load_4d(v_s + s * KV_BYTES + c * KV_CHUNK, &v_map, v_full + 8 * s, 64 * c, hk, k0, b);
      }
    }
    return;
  }

  regs_take<240>();
  const int cw = wg - 1, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  // Accumulator layout of m64nN: this thread holds rows r0 (elements 4j, 4j + 1) and r0 + 8
  // (4j + 2, 4j + 3), columns 8j + 2t and 8j + 2t + 1.
  const int r0 = q0 + cw * 64 + warp * 16 + g;
  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
  float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.0f, l1 = 0.0f;

  mbar_wait(q_full, 0);
  for (int n = 0; n < blocks; ++n) {
    const int s = n % STAGES, k0 = (k_begin + n) * BK;
    const unsigned parity = (n / STAGES) & 1;
    float sc[BK / 2];
    mbar_wait(k_full + 8 * s, parity);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const unsigned long long da = smem_desc(q_s + (kk / 4) * Q_CHUNK + cw * 64 * 128 + (kk % 4) * 32, 16, 1024);
      const unsigned long long db = smem_desc(k_s + s * KV_BYTES + (kk / 4) * KV_CHUNK + (kk % 4) * 32, 16, 1024);
      Wgmma<BK, 0, 0>::run(sc, da, db, kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_hold(sc);
    if (lane == 0) mbar_arrive(k_empty + 8 * s);

#pragma unroll
    for (int i = 0; i < BK / 2; ++i) {
      sc[i] *= p.qscale;
#if SOFTCAP
      sc[i] = p.cap2 * fast_tanh(sc[i]);
#endif
    }
    // Masks only where the block crosses the end of the keys or the band's edge for some row
    // of the tile.
    const bool inside = (p.window_left < 0 || k0 >= q0 + BQ - 1 + p.diagonal - p.window_left) &&
                        (p.window_right < 0 || k0 + BK - 1 <= q0 + p.diagonal + p.window_right);
    if (k0 + BK > p.seq_k || !inside) {
#pragma unroll
      for (int j = 0; j < BK / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = k0 + 8 * j + 2 * t + (e & 1), row = r0 + 8 * (e >> 1);
          const bool ok = key < p.seq_k && (p.window_left < 0 || key >= row + p.diagonal - p.window_left) &&
                          (p.window_right < 0 || key <= row + p.diagonal + p.window_right);
          if (!ok) sc[4 * j + e] = NEG_INF;
        }
    }

    float x0 = m0, x1 = m1;
#pragma unroll
    for (int j = 0; j < BK / 8; ++j) {
      x0 = fmaxf(x0, fmaxf(sc[4 * j], sc[4 * j + 1]));
      x1 = fmaxf(x1, fmaxf(sc[4 * j + 2], sc[4 * j + 3]));
    }
    x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 1));
    x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 2));
    x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 1));
    x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 2));
    // A row that has seen no allowed key keeps max -inf; exponentiating against 0 keeps it 0.
    const float b0 = x0 == NEG_INF ? 0.0f : x0, b1 = x1 == NEG_INF ? 0.0f : x1;
    const float a0 = fast_exp2(m0 - b0), a1 = fast_exp2(m1 - b1);
    m0 = x0;
    m1 = x1;
    l0 *= a0;
    l1 *= a1;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      o[4 * j] *= a0;
      o[4 * j + 1] *= a0;
      o[4 * j + 2] *= a1;
      o[4 * j + 3] *= a1;
    }
    unsigned pa[BK / 16][4];
#pragma unroll
    for (int j = 0; j < BK / 8; ++j) {
      const float p0 = fast_exp2(sc[4 * j] - b0), p1 = fast_exp2(sc[4 * j + 1] - b0);
      const float p2 = fast_exp2(sc[4 * j + 2] - b1), p3 = fast_exp2(sc[4 * j + 3] - b1);
      l0 += p0 + p1;
      l1 += p2 + p3;
      pa[j / 2][(j % 2) * 2] = pack2(p0, p1);
      pa[j / 2][(j % 2) * 2 + 1] = pack2(p2, p3);
    }

    mbar_wait(v_full + 8 * s, parity);
    wgmma_fence();
#pragma unroll
    for (int kc = 0; kc < BK / 16; ++kc)
      WgmmaRs<D, 1>::run(o, pa[kc], smem_desc(v_s + s * KV_BYTES + kc * 2048, KV_CHUNK, 1024), 1);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_hold(o);
    if (lane == 0) mbar_arrive(v_empty + 8 * s);
  }

  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = r0 + 8 * half;
    if (row >= p.seq_q) continue;
    const float inv = half ? inv1 : inv0;
    elem_t* dst = out + ((static_cast<long long>(b) * p.seq_q + row) * p.heads + h) * D;
#pragma unroll
    for (int j = 0; j < D / 8; ++j)
      *reinterpret_cast<unsigned*>(dst + 8 * j + 2 * t) = pack2(o[4 * j + 2 * half] * inv, o[4 * j + 2 * half + 1] * inv);
    if (p.has_lse && t == 0) {
      const float l = half ? l1 : l0, m = half ? m1 : m0;
      lse[(static_cast<long long>(b) * p.heads + h) * p.seq_q + row] =
          l > 0.0f ? (m + __log2f(l)) * 0.6931471805599453f : NEG_INF;
    }
  }
}
