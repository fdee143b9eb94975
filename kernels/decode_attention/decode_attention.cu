// The decode engine's pass 1 on NVIDIA tensor cores (sm_80 and later), f16 or bf16 cache
// (decode_attention/engine.hpp has the semantics; decode_attention.cl's decode_stream is the
// portable counterpart with the same scratch layout, and its decode_reduce merges the splits).
//
// A block takes one (split, kv head, query block): the R = G x BQ query rows of that kv head
// are the 16 rows of mma.sync's A (rows past R are zeros), so each key is read once for all of
// them. Every warp streams keys of its own: tile i of the block's chunk gives warp w the BK keys
// from c0 + i * WARPS * BK + w * BK, copied by cp.async into the warp's own ring of STAGES
// buffers, STAGES - 1 tiles ahead of the arithmetic. Nothing but the warp waits on a copy, so the
// loop has no block-wide barrier; the key rows' addresses (a block table lookup when paged) are
// read a tile ahead of their copies. Each warp keeps its own running max, sum and accumulator
// (S = Q K^T and O += P V by mma.sync, P straight from the score registers); the warps merge
// once at the end, and with one split the block writes the normalised output itself (sinks
// included), so decode_reduce runs only when the context is split.
//
// Rows of K, V and Q in shared memory are D elements with their 16-byte chunks swizzled by the
// row (chunk c of row r at c ^ (r % 8)): ldmatrix's eight rows then hit distinct banks.
//
// Build options (kernels/decode_attention/cuda.cpp): D (head_dim, a multiple of 64), G (query
// heads per kv head), BQ (query tokens per block), WARPS, BK (keys per warp and tile, 16 or 32),
// STAGES, PAGED, BF16.

#include "common/cuda.cuh"

#define R (G * BQ)
#define CH (D / 8)           // 16-byte chunks a row
#define TILE (WARPS * BK)    // keys a tile of the block
#define NT (BK / 8)          // n8 tiles of scores a warp
#define NO (D / 8)           // n8 tiles of the accumulator
#define QREG (D <= 128)      // the queries' fragments stay in registers
#define NEG (-1.0e30f)       // the running max before any key (decode_reduce's convention)

// Flags (decode_attention.cl's).
#define HAS_BEGIN 2
#define VARLEN 4
#define SINKS 8

#if R > 16
#error "at most 16 query rows a block"
#endif

__device__ __forceinline__ int swz(int row, int chunk) { return row * D + ((chunk ^ (row & 7)) << 3); }

// The query block `blk`: sequence, first token, tokens held and the sequence's query length
// (decode_attention.cl's find_block); nq = 0 when it holds none.
struct QueryBlock {
  int s, t0, nq, qlen;
};
__device__ QueryBlock find_block(int blk, int flags, int num_seqs, const int* q_loc) {
  if (!(flags & VARLEN)) return {blk, blk, blk < num_seqs ? 1 : 0, 1};
  int lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (q_loc[mid] / BQ + mid <= blk) lo = mid;
    else hi = mid - 1;
  }
  const int first = q_loc[lo] / BQ + lo;
  const int start = q_loc[lo] + (blk - first) * BQ, end = q_loc[lo + 1];
  if (blk < first || start >= end) return {0, 0, 0, 1};
  return {lo, start, min(BQ, end - start), end - q_loc[lo]};
}

extern "C" __global__ void __launch_bounds__(WARPS * 32)
    ejk_decode_mma(const elem_t* __restrict__ q, const elem_t* __restrict__ k, const elem_t* __restrict__ v,
                   const int* __restrict__ tables, const int* __restrict__ kv_begin, const int* __restrict__ kv_end,
                   const int* __restrict__ q_loc, float* __restrict__ part_acc, float* __restrict__ part_ml,
                   elem_t* __restrict__ out, const void* __restrict__ sinks, int sinks_dtype, int flags, int num_seqs,
                   int heads, int kv_heads, int block_size, int max_blocks, int num_blocks, int seq_len, int splits,
                   int window, float qscale, float cap2) {
  extern __shared__ __align__(128) unsigned char smem[];
  elem_t* const q_s = reinterpret_cast<elem_t*>(smem);  // 16 x D
  elem_t* const ring = q_s + 16 * D;                     // [WARPS][STAGES][K, V][BK x D]

  const int split = blockIdx.x, g = blockIdx.y, blk = blockIdx.z;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gr = lane / 4, t4 = lane % 4;
  const QueryBlock qb = find_block(blk, flags, num_seqs, q_loc);
  if (qb.nq == 0) return;
  const int s = qb.s;
  const int kve = kv_end[s], kvb = (flags & HAS_BEGIN) ? kv_begin[s] : 0;
  const int i0 = qb.t0 - ((flags & VARLEN) ? q_loc[s] : s);
  // Row r's visible keys [lo, hi): query token r / G of the block at pos = kve - qlen + i0 + r / G.
  auto bounds = [&](int r, int& lo, int& hi) {
    const int qi = r / G, pos = kve - qb.qlen + i0 + qi;
    const bool valid = r < R && qi < qb.nq;
    lo = valid ? (window > 0 ? max(kvb, pos - window + 1) : kvb) : 0;
    hi = valid ? pos + 1 : 0;
  };
  int lo0, hi0, lo1, hi1, u0, u1, unused;
  bounds(gr, lo0, hi0);
  bounds(gr + 8, lo1, hi1);
  bounds(0, u0, unused);
  bounds((qb.nq - 1) * G, unused, u1);
  const int span = max(0, u1 - u0);
  const int chunk = round_up(ceil_div(span, splits), TILE);
  const int c0 = u0 + split * chunk, c1 = min(c0 + chunk, u1);
  const int tiles = c1 > c0 ? ceil_div(c1 - c0, TILE) : 0;

  // The queries, rows past R or past the block's tokens zero.
  for (int c = tid; c < 16 * CH; c += WARPS * 32) {
    const int r = c / CH, col = c % CH;
    uint4 x = make_uint4(0, 0, 0, 0);
    if (r < R && r / G < qb.nq)
      x = *reinterpret_cast<const uint4*>(q + (static_cast<long long>(qb.t0 + r / G) * heads + g * G + r % G) * D + col * 8);
    *reinterpret_cast<uint4*>(q_s + swz(r, col)) = x;
  }

  // Key rows: element offset of key t's row for kv head g, -1 past the chunk. Unchecked index
  // arrays (the API's check_indices off) stay inside the table and the cache.
  const int lim = (PAGED ? max_blocks * block_size : seq_len) - 1;
  auto key_row = [&](int t) -> long long {
    if (t >= c1) return -1;
    const int tc = min(max(t, 0), lim);
#if PAGED
    const int page = min(max(tables[static_cast<long long>(s) * max_blocks + tc / block_size], 0), num_blocks - 1);
    return ((static_cast<long long>(page) * kv_heads + g) * block_size + tc % block_size) * D;
#else
    return ((static_cast<long long>(s) * seq_len + tc) * kv_heads + g) * D;
#endif
  };
  // Lane j < BK holds the row of key j of the next tile to copy, read one tile ahead.
  auto tile_row = [&](int i) -> long long { return lane < BK ? key_row(c0 + i * TILE + warp * BK + lane) : -1; };
  elem_t* const my_ring = ring + warp * STAGES * 2 * BK * D;
  long long next_row = tile_row(0);
  int issued = 0;
  auto issue = [&]() {
    const long long row = next_row;
    next_row = tile_row(issued + 1);
    if (issued < tiles) {
      elem_t* const kd = my_ring + (issued % STAGES) * 2 * BK * D;
      elem_t* const vd = kd + BK * D;
#pragma unroll
      for (int c = lane; c < BK * CH; c += 32) {
        const int j = c / CH, col = c % CH;
        const long long at = __shfl_sync(0xffffffffu, row, j);
        const bool in = at >= 0;
        cp16(kd + swz(j, col), in ? k + at + col * 8 : k, in ? 16 : 0);
        cp16(vd + swz(j, col), in ? v + at + col * 8 : v, in ? 16 : 0);
      }
    }
    cp_commit();
    ++issued;
  };
#pragma unroll
  for (int i = 0; i < STAGES - 1; ++i) issue();
  __syncthreads();  // the queries

#if QREG
  unsigned qa[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) ldsm_x4(qa[kk], q_s + swz(lane & 15, 2 * kk + (lane >> 4)));
#endif

  float acc[NO][4];
#pragma unroll
  for (int j = 0; j < NO; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  // Rows gr and gr + 8: running maxima and this thread's share of the sums.
  float m0 = NEG, m1 = NEG, l0 = 0.0f, l1 = 0.0f;

  for (int i = 0; i < tiles; ++i) {
    issue();
    cp_wait<STAGES - 1>();
    __syncwarp();
    const elem_t* const kb = my_ring + (i % STAGES) * 2 * BK * D;
    const elem_t* const vb = kb + BK * D;
    const int key0 = c0 + i * TILE + warp * BK;

    float sc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk += 2) {
#if QREG
      const unsigned(&a0)[4] = qa[kk];
      const unsigned(&a1)[4] = qa[kk + 1];
#else
      unsigned a0[4], a1[4];
      ldsm_x4(a0, q_s + swz(lane & 15, 2 * kk + (lane >> 4)));
      ldsm_x4(a1, q_s + swz(lane & 15, 2 * kk + 2 + (lane >> 4)));
#endif
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        unsigned b[4];
        const int kr = j * 8 + (lane & 7);
        ldsm_x4(b, kb + swz(kr, 2 * kk + (lane >> 3)));
        mma(sc[j], a0, b[0], b[1]);
        mma(sc[j], a1, b[2], b[3]);
      }
    }

    float x0 = NEG, x1 = NEG;
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int t = key0 + j * 8 + 2 * t4 + (e & 1);
        const bool vis = e < 2 ? (t < c1 && t >= lo0 && t < hi0) : (t < c1 && t >= lo1 && t < hi1);
        const float u = sc[j][e] * qscale;
        const float z = cap2 > 0.0f ? cap2 * tanhf(u) : u;
        sc[j][e] = vis ? z : NEG_INF;
        if (e < 2) x0 = fmaxf(x0, sc[j][e]);
        else x1 = fmaxf(x1, sc[j][e]);
      }
#pragma unroll
    for (int o = 1; o <= 2; o *= 2) {
      x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, o));
      x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, o));
    }
    const float n0 = fmaxf(m0, x0), n1 = fmaxf(m1, x1);
    const float a0 = fast_exp2(m0 - n0), a1 = fast_exp2(m1 - n1);
    m0 = n0;
    m1 = n1;
    l0 *= a0;
    l1 *= a1;
    scale_rows(acc, a0, a1);
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      sc[j][0] = fast_exp2(sc[j][0] - n0);
      sc[j][1] = fast_exp2(sc[j][1] - n0);
      sc[j][2] = fast_exp2(sc[j][2] - n1);
      sc[j][3] = fast_exp2(sc[j][3] - n1);
      l0 += sc[j][0] + sc[j][1];
      l1 += sc[j][2] + sc[j][3];
    }
    // O += P V: P's 16-key steps straight from the score registers.
#pragma unroll
    for (int kc = 0; kc < BK / 16; ++kc) {
      const unsigned pa[4] = {pack2(sc[2 * kc][0], sc[2 * kc][1]), pack2(sc[2 * kc][2], sc[2 * kc][3]),
                              pack2(sc[2 * kc + 1][0], sc[2 * kc + 1][1]), pack2(sc[2 * kc + 1][2], sc[2 * kc + 1][3])};
      const int vr = kc * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
#pragma unroll
      for (int n = 0; n < NO; n += 2) {
        unsigned b[4];
        ldsm_x4_t(b, vb + swz(vr, n + (lane >> 4)));
        mma(acc[n], pa, b[0], b[1]);
        mma(acc[n + 1], pa, b[2], b[3]);
      }
    }
    __syncwarp();  // every lane is done with the buffer the next issue refills
  }
  cp_wait<0>();
#pragma unroll
  for (int o = 1; o <= 2; o *= 2) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, o);
    l1 += __shfl_xor_sync(0xffffffffu, l1, o);
  }

  // The warps' partial results meet in shared memory (over the rings): [WARPS][16][D + 2].
  __syncthreads();
  constexpr int W = D + 2;
  float* const part = reinterpret_cast<float*>(ring) + warp * 16 * W;
#pragma unroll
  for (int j = 0; j < NO; ++j) {
    *reinterpret_cast<float2*>(part + gr * W + j * 8 + 2 * t4) = make_float2(acc[j][0], acc[j][1]);
    *reinterpret_cast<float2*>(part + (gr + 8) * W + j * 8 + 2 * t4) = make_float2(acc[j][2], acc[j][3]);
  }
  if (t4 == 0) {
    part[gr * W + D] = m0;
    part[gr * W + D + 1] = l0;
    part[(gr + 8) * W + D] = m1;
    part[(gr + 8) * W + D + 1] = l1;
  }
  __syncthreads();
  const float* const parts = reinterpret_cast<const float*>(ring);
  for (int e = tid; e < R * D; e += WARPS * 32) {
    const int r = e / D, d = e % D, qi = r / G;
    if (qi >= qb.nq) continue;
    float M = NEG;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) M = fmaxf(M, parts[(w * 16 + r) * W + D]);
    float L = 0.0f, A = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      const float f = fast_exp2(parts[(w * 16 + r) * W + D] - M);
      L += parts[(w * 16 + r) * W + D + 1] * f;
      A += parts[(w * 16 + r) * W + d] * f;
    }
    const int h = g * G + r % G;
    const long long row = static_cast<long long>(qb.t0 + qi) * heads + h;
    if (splits == 1) {
      if (flags & SINKS) {
        const float sink = load_any(sinks, sinks_dtype, h) * 1.44269504088896340736f;
        const float M2 = fmaxf(M, sink), f = fast_exp2(M - M2);
        L = L * f + fast_exp2(sink - M2);
        A *= f;
      }
      // No key seen: A is 0 whatever L holds (a sink alone).
      out[row * D + d] = to_elem(L > 0.0f ? A / L : 0.0f);
    } else {
      const long long at = row * splits + split;
      part_acc[at * D + d] = A;
      if (d == 0) {
        part_ml[2 * at] = M;
        part_ml[2 * at + 1] = L;
      }
    }
  }
}
