// mla_decode on NVIDIA tensor cores (sm_80 and later), f16 or bf16: the absorb pass (queries
// into the latent space, f32), the attention pass (each part's unnormalised o_lat and its running
// max and sum, log2 domain, as mla_decode.cl's mla_attend), and the parts' merge with the value
// projection in one pass.
//
// A block of four warps takes one part of the context of one sequence for 16 heads (the m16 of
// mma.sync; heads past the last are zero rows). Tiles of BN cache rows are copied by cp.async
// into a ring of STAGES buffers and serve all 16 heads: the heads are the rows of S = Q C^T (each warp a
// quarter of the tile's tokens, over the whole latent width) and of O += P C[:, :RANK] (each warp a
// quarter of the latent columns), so the cache is read once per block, as FlashMLA reads it.
//
// Build options (kernels/mla_attention/cuda.cpp): RANK ROPE BN STAGES BF16 (and NOPE, VDIM for the passes).

#include "common/cuda.cuh"
#if __CUDA_ARCH__ >= 900
#include "common/hopper.cuh"
#define BULK 1  // tiles by the bulk copy engine, a row a copy, completing on a barrier per stage
#else
#define BULK 0
#endif

#define WIDTH (RANK + ROPE)
#define ROW (WIDTH + 8)  // shared row stride in elements: 16 bytes of padding spread ldmatrix's rows
#define P_ROW (BN + 8)
#define WARPS 4
#define NT_S (BN / WARPS / 8)      // n8 tiles of scores a warp
#define KS (WIDTH / 16)            // k16 steps of the scores
#define QK ((KS + WARPS - 1) / WARPS)  // of them a warp
#define S_ROW (BN + 8)             // partial scores' row stride in floats: float2 stores without bank conflicts
#define NT_O (RANK / WARPS / 8)    // n8 tiles of o_lat a warp
#define CHUNKS (WIDTH / 8)         // 16-byte chunks a cache row

// Rows [t0, t0 + BN) of the sequence's cache, which lie in page `page`, into `dst`. Rows past
// `end` are masked out of the scores; their P is 0 and they must be finite: zeros through
// cp.async, or copies of row end - 1 (the same page) through the bulk engine, which cannot
// zero-fill. With BULK, warp 0 issues the copies, completing on `bar`.
__device__ __forceinline__ void load_tile(elem_t* dst, const elem_t* kv, int page, int block_size, int t0, int end,
                                          unsigned bar) {
  const long long base = static_cast<long long>(page) * block_size - t0 / block_size * block_size;
#if BULK
  if (threadIdx.x >= 32) return;
  if (threadIdx.x == 0) mbar_expect(bar, BN * WIDTH * 2);
  __syncwarp();
  for (int r = threadIdx.x; r < BN; r += 32) {
    const long long row = base + min(t0 + r, end - 1);
    bulk_load(shared_addr(dst + r * ROW), kv + row * WIDTH, WIDTH * 2, bar);
  }
#else
  (void)bar;
  for (int c = threadIdx.x; c < BN * CHUNKS; c += WARPS * 32) {
    const int r = c / CHUNKS, col = (c % CHUNKS) * 8;
    const bool in = t0 + r < end;
    cp16(dst + r * ROW + col, in ? kv + (base + t0 + r) * WIDTH + col : kv, in ? 16 : 0);
  }
#endif
}

extern "C" __global__ void __launch_bounds__(WARPS * 32)
    ejk_mla_attend_mma(const float* __restrict__ qs, const elem_t* __restrict__ kv, const int* __restrict__ block_tables,
                       const int* __restrict__ context_lens, float* __restrict__ part_o, float* __restrict__ part_ml,
                       int heads, int block_size, int max_blocks, int splits) {
  extern __shared__ __align__(16) unsigned char smem[];
  elem_t* const q_s = reinterpret_cast<elem_t*>(smem);  // 16 x ROW
  elem_t* const kv_s = q_s + 16 * ROW;                  // STAGES x BN x ROW
  elem_t* const p_s = kv_s + STAGES * BN * ROW;         // 16 x P_ROW
  float* const red = reinterpret_cast<float*>(p_s + 16 * P_ROW);  // [2][WARPS][16]: maxima, sums
  float* const part_s = red + 2 * WARPS * 16;                       // [WARPS][16][S_ROW]: partial scores
  const unsigned bars = shared_addr(part_s + WARPS * 16 * S_ROW);   // STAGES barriers (BULK)

  const int split = blockIdx.x, h0 = blockIdx.y * 16, b = blockIdx.z;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int* table = block_tables + static_cast<long long>(b) * max_blocks;
  start_next();
#if BULK
  if (tid == 0) {
    for (int i = 0; i < STAGES; ++i) mbar_init(bars + 8 * i, 1);
    mbar_fence_init();
  }
  __syncthreads();
#endif

  const int n = context_lens[b];
  const int per = ceil_div(n, splits);
  const int chunk = round_up(per, BN);
  const int start = min(n, split * chunk), end = min(n, start + chunk);
  const int tiles = ceil_div(end - start, BN);

  float acc[NT_O][4];
#pragma unroll
  for (int j = 0; j < NT_O; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
  // This thread's heads: rows g and g + 8 of the block.
  float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.0f, l1 = 0.0f;

  // Tile i + STAGES - 1 is copied while tile i is used; its page is read a tile earlier still.
  auto page_of = [&](int i) { return i < tiles ? table[(start + i * BN) / block_size] : 0; };
  int next_page = page_of(0);
#pragma unroll
  for (int i = 0; i < STAGES - 1; ++i) {
    const int page = next_page;
    next_page = page_of(i + 1);
    if (i < tiles) load_tile(kv_s + i * BN * ROW, kv, page, block_size, start + i * BN, end, bars + 8 * i);
    cp_commit();
  }
  // The queries come from the absorb pass, which may still be running (Launch::early): the first
  // tiles are on their way before they are waited for, and they are read in one round trip.
  wait_previous();
  {
    constexpr int Q4 = 16 * WIDTH / 4, QI = (Q4 + WARPS * 32 - 1) / (WARPS * 32);
    const float* qb = qs + (static_cast<long long>(b) * heads + h0) * WIDTH;
    float4 x[QI];
#pragma unroll
    for (int i = 0; i < QI; ++i) {
      const int e = tid + i * WARPS * 32, r = e / (WIDTH / 4), c = e % (WIDTH / 4) * 4;
      x[i] = e < Q4 && h0 + r < heads ? *reinterpret_cast<const float4*>(qb + r * WIDTH + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int i = 0; i < QI; ++i) {
      const int e = tid + i * WARPS * 32, r = e / (WIDTH / 4), c = e % (WIDTH / 4) * 4;
      if (e < Q4) *reinterpret_cast<uint2*>(q_s + r * ROW + c) = make_uint2(pack2(x[i].x, x[i].y), pack2(x[i].z, x[i].w));
    }
  }
  __syncthreads();
  unsigned qf[QK][4];  // this warp's k16 steps of Q, as mma.sync's A
#pragma unroll
  for (int i = 0; i < QK; ++i) {
    const int ks = warp + i * WARPS;
    if (KS % WARPS == 0 || ks < KS) ldsm_x4(qf[i], q_s + (lane & 15) * ROW + ks * 16 + ((lane >> 4) << 3));
  }
  for (int i = 0; i < tiles; ++i) {
    const int t0 = start + i * BN;
    elem_t* const cur = kv_s + (i % STAGES) * BN * ROW;
    {
      const int j = i + STAGES - 1, page = next_page;
      next_page = page_of(j + 1);
      if (j < tiles) load_tile(kv_s + (j % STAGES) * BN * ROW, kv, page, block_size, start + j * BN, end, bars + 8 * (j % STAGES));
    }
#if BULK
    mbar_wait(bars + 8 * (i % STAGES), (i / STAGES) & 1);
#else
    cp_commit();
    cp_wait<STAGES - 1>();
#endif
    __syncthreads();

    // S = Q C^T for the tile's BN tokens over this warp's k16 steps of the width (warp, warp +
    // WARPS, ...), Q from registers; then the warps' partial sums meet in shared memory and each
    // warp takes its NT_S * 8 tokens of the total.
    float ps[BN / 8][4];
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) ps[j][e] = 0.0f;
#pragma unroll
    for (int i = 0; i < QK; ++i) {
      const int ks = warp + i * WARPS;
      if (KS % WARPS == 0 || ks < KS) {
#pragma unroll
        for (int j = 0; j < BN / 8; j += 2) {
          unsigned bf[4];
          // Matrices (tokens 0-7, 8-15 of the pair) x (k 0-7, 8-15).
          ldsm_x4(bf, cur + (j * 8 + (lane & 7) + ((lane >> 4) << 3)) * ROW + ks * 16 + (((lane >> 3) & 1) << 3));
          mma(ps[j], qf[i], bf[0], bf[1]);
          mma(ps[j + 1], qf[i], bf[2], bf[3]);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      float* const row = part_s + (warp * 16 + g) * S_ROW + j * 8 + 2 * t;
      *reinterpret_cast<float2*>(row) = make_float2(ps[j][0], ps[j][1]);
      *reinterpret_cast<float2*>(row + 8 * S_ROW) = make_float2(ps[j][2], ps[j][3]);
    }
    __syncthreads();
    float s[NT_S][4];
#pragma unroll
    for (int j = 0; j < NT_S; ++j) {
      s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
      const int col = (warp * NT_S + j) * 8 + 2 * t;
#pragma unroll
      for (int w = 0; w < WARPS; ++w) {
        const float2 lo = *reinterpret_cast<const float2*>(part_s + (w * 16 + g) * S_ROW + col);
        const float2 hi = *reinterpret_cast<const float2*>(part_s + (w * 16 + g + 8) * S_ROW + col);
        s[j][0] += lo.x;
        s[j][1] += lo.y;
        s[j][2] += hi.x;
        s[j][3] += hi.y;
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
    scale_rows(acc, a0, a1);
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

// The absorb pass, per head a small GEMM over the batch on tensor cores, so that each head's
// weights are read once rather than once per sequence: out[b, h, n0 + n] =
// scale * sum_k a[b, h, k] w[h, k, n] for 32 rows b and NB columns n a block of four warps (16
// rows and NB / 2 columns a warp), a and w of the element type with f32 accumulation. The
// block's rows of a and columns of w are copied whole by cp.async (rows padded by 16 bytes, so
// ldmatrix's eight rows fall in distinct banks).
template <int NB, int K>
__device__ __forceinline__ void head_gemm(const elem_t* __restrict__ a, const elem_t* __restrict__ w, int ndim,
                                          float* __restrict__ out, int out_stride, int batch, int heads, float scale) {
  constexpr int AR = K + 8, WR = NB + 8, NT = NB / 16;  // shared row strides; n8 tiles a warp
  static_assert(K % 16 == 0 && NB % 16 == 0, "whole mma.sync tiles");
  extern __shared__ __align__(16) unsigned char smem[];
  elem_t* const a_s = reinterpret_cast<elem_t*>(smem);  // [32][AR]
  elem_t* const w_s = a_s + 32 * AR;                     // [K][WR]
  const int n0 = blockIdx.x * NB, h = blockIdx.y, b0 = blockIdx.z * 32, tid = threadIdx.x;
  for (int c = tid; c < 32 * (K / 8); c += 128) {
    const int r = c / (K / 8), k = c % (K / 8) * 8, b = b0 + r;
    const bool in = b < batch;
    cp16(a_s + r * AR + k, in ? a + (static_cast<long long>(b) * heads + h) * K + k : a, in ? 16 : 0);
  }
  for (int c = tid; c < K * (NB / 8); c += 128) {
    const int k = c / (NB / 8), n = c % (NB / 8) * 8;
    cp16(w_s + k * WR + n, w + (static_cast<long long>(h) * K + k) * ndim + n0 + n, 16);
  }
  cp_commit();
  cp_wait<0>();
  __syncthreads();
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int r0 = (warp / 2) * 16, c0 = (warp % 2) * (NB / 2);
  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll 4
  for (int k = 0; k < K; k += 16) {
    unsigned fa[4];
    ldsm_x4(fa, a_s + (r0 + (lane & 15)) * AR + k + ((lane >> 4) << 3));
#pragma unroll
    for (int j = 0; j < NT; j += 2) {
      unsigned fb[4];
      // Stored [k][n]: matrices (k 0-7, 8-15) x (n 0-7, 8-15), transposed.
      ldsm_x4_t(fb, w_s + (k + (lane & 7) + (((lane >> 3) & 1) << 3)) * WR + c0 + j * 8 + ((lane >> 4) << 3));
      mma(acc[j], fa, fb[0], fb[1]);
      mma(acc[j + 1], fa, fb[2], fb[3]);
    }
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int b = b0 + r0 + g + 8 * half;
    if (b >= batch) continue;
    float* const o = out + (static_cast<long long>(b) * heads + h) * out_stride + n0 + c0 + 2 * t;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      *reinterpret_cast<float2*>(o + 8 * j) = make_float2(acc[j][2 * half] * scale, acc[j][2 * half + 1] * scale);
    }
  }
}

// qs = scale log2(e) [q_nope W_kc, q_pe]: grid (RANK / 64 + the rope's tiles, heads, batch / 32),
// 128 threads, dynamic shared memory 2 * (32 * (NOPE + 8) + NOPE * 72) bytes.
extern "C" __global__ void __launch_bounds__(128)
    ejk_mla_absorb(const elem_t* __restrict__ q_nope, const elem_t* __restrict__ q_pe, const elem_t* __restrict__ w_kc,
                   float* __restrict__ qs, int batch, int heads, float scale) {
  start_next();
  if (blockIdx.x * 64 < RANK) {
    head_gemm<64, NOPE>(q_nope, w_kc, RANK, qs, WIDTH, batch, heads, scale);
    return;
  }
  const int n = (blockIdx.x * 64 - RANK) + threadIdx.x % 64, h = blockIdx.y;
  if (n >= ROPE) return;
  for (int b = blockIdx.z * 32 + threadIdx.x / 64; b < min(batch, static_cast<int>(blockIdx.z) * 32 + 32); b += 2) {
    const long long bh = static_cast<long long>(b) * heads + h;
    qs[bh * WIDTH + RANK + n] = scale * to_f32(q_pe[bh * ROPE + n]);
  }
}

// out = o W_vc with o the parts' o_lat merged by log-sum-exp and normalised, straight into the
// projection's left operand in shared memory (in the element type, as the reference rounds it):
// one pass, no merged o_lat in global memory. A block takes MR (at most 8) sequences of one head
// (rows MR-15 of mma.sync's A are zeros) and PNB columns of out: grid (VDIM / PNB, heads,
// batch / MR), 256 threads, dynamic shared memory merge_project_shared (cuda.cpp). W_vc's slice
// is copied first, so that its copy runs while the parts are merged; the pass is bound by the
// latency of reading the parts, so each thread keeps every split's loads in flight and few rows
// a block put two blocks on a multiprocessor. Parts that saw no token have l = 0. The eight warps
// take every eighth 16-wide step of the latent rank and add their products through shared memory.
extern "C" __global__ void __launch_bounds__(256)
    ejk_mla_merge_project(const float* __restrict__ part_o, const float* __restrict__ part_ml,
                          const elem_t* __restrict__ w_vc, elem_t* __restrict__ out, int batch, int heads, int splits) {
  constexpr int AR = RANK + 8, WR = PNB + 8, SR = PNB + 8, NT = PNB / 8, ITEMS = (MR * (RANK / 4) + 255) / 256;
  static_assert(MR >= 1 && MR <= 8, "a warp a row for the part weights");
  static_assert(RANK % 16 == 0 && PNB % 16 == 0, "whole mma.sync tiles");
  extern __shared__ __align__(16) unsigned char smem[];
  elem_t* const a_s = reinterpret_cast<elem_t*>(smem);              // [16][AR], rows MR-15 zero
  elem_t* const w_s = a_s + 16 * AR;                                 // [RANK][WR]
  float* const weight = reinterpret_cast<float*>(w_s + RANK * WR);  // [8][64]; then [8][8][SR] partial sums
  const int n0 = blockIdx.x * PNB, h = blockIdx.y, b0 = blockIdx.z * MR, tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;

  for (int c = tid; c < RANK * (PNB / 8); c += 256) {
    const int k = c / (PNB / 8), n = c % (PNB / 8) * 8;
    cp16(w_s + k * WR + n, w_vc + (static_cast<long long>(h) * RANK + k) * VDIM + n0 + n, 16);
  }
  cp_commit();
  for (int c = tid; c < (16 - MR) * AR / 2; c += 256) reinterpret_cast<unsigned*>(a_s + MR * AR)[c] = 0u;
  wait_previous();  // the parts come from the attention pass (Launch::early)

  if (warp < MR) {
    const int r = warp, b = b0 + r;  // a warp a row
    const float* ml = part_ml + (static_cast<long long>(b) * heads + h) * splits * 2;
    float mx = NEG_INF, total = 0.0f;
    if (b < batch) {
      for (int s = lane; s < splits; s += 32)
        if (ml[2 * s + 1] > 0.0f) mx = fmaxf(mx, ml[2 * s]);
      for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      for (int s = lane; s < splits; s += 32)
        if (ml[2 * s + 1] > 0.0f) total += fast_exp2(ml[2 * s] - mx) * ml[2 * s + 1];
      for (int off = 16; off > 0; off /= 2) total += __shfl_xor_sync(0xffffffffu, total, off);
    }
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;
    for (int s = lane; s < splits; s += 32)
      weight[r * 64 + s] = b < batch && ml[2 * s + 1] > 0.0f ? fast_exp2(ml[2 * s] - mx) * inv : 0.0f;
  }
  __syncthreads();
  float4 x[ITEMS];
  const float* po[ITEMS];
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int c = min(tid + 256 * i, MR * (RANK / 4) - 1), r = c / (RANK / 4), b = min(b0 + r, batch - 1);
    x[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    po[i] = part_o + (static_cast<long long>(b) * heads + h) * splits * RANK + c % (RANK / 4) * 4;
  }
#pragma unroll 8
  for (int s = 0; s < splits; ++s)
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const float w = weight[min(tid + 256 * i, MR * (RANK / 4) - 1) / (RANK / 4) * 64 + s];  // 0 past the batch
      const float4 v = *reinterpret_cast<const float4*>(po[i] + static_cast<long long>(s) * RANK);
      x[i].x = fmaf(w, v.x, x[i].x);
      x[i].y = fmaf(w, v.y, x[i].y);
      x[i].z = fmaf(w, v.z, x[i].z);
      x[i].w = fmaf(w, v.w, x[i].w);
    }
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int c = tid + 256 * i, r = c / (RANK / 4), col = c % (RANK / 4) * 4;
    if (c < MR * (RANK / 4)) *reinterpret_cast<uint2*>(a_s + r * AR + col) = make_uint2(pack2(x[i].x, x[i].y), pack2(x[i].z, x[i].w));
  }
  cp_wait<0>();
  __syncthreads();

  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll 2
  for (int k = warp * 16; k < RANK; k += 8 * 16) {
    unsigned fa[4];
    ldsm_x4(fa, a_s + (lane & 15) * AR + k + ((lane >> 4) << 3));
#pragma unroll
    for (int j = 0; j < NT; j += 2) {
      unsigned fb[4];
      // Stored [k][n]: matrices (k 0-7, 8-15) x (n 0-7, 8-15), transposed.
      ldsm_x4_t(fb, w_s + (k + (lane & 7) + (((lane >> 3) & 1) << 3)) * WR + j * 8 + ((lane >> 4) << 3));
      mma(acc[j], fa, fb[0], fb[1]);
      mma(acc[j + 1], fa, fb[2], fb[3]);
    }
  }
  // The weights are read: their room takes the warps' partial products (rows 0-7: c0 and c1).
  float* const sum = weight;
#pragma unroll
  for (int j = 0; j < NT; ++j)
    *reinterpret_cast<float2*>(sum + (warp * 8 + g) * SR + j * 8 + 2 * t) = make_float2(acc[j][0], acc[j][1]);
  __syncthreads();
  for (int c = tid; c < MR * PNB / 2; c += 256) {
    const int r = c / (PNB / 2), n = c % (PNB / 2) * 2, b = b0 + r;
    if (b >= batch) continue;
    float x0 = 0.0f, x1 = 0.0f;
#pragma unroll
    for (int w = 0; w < 8; ++w) {
      x0 += sum[(w * 8 + r) * SR + n];
      x1 += sum[(w * 8 + r) * SR + n + 1];
    }
    *reinterpret_cast<unsigned*>(out + (static_cast<long long>(b) * heads + h) * VDIM + n0 + n) = pack2(x0, x1);
  }
}
