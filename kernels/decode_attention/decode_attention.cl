// The decode engine on OpenCL (decode_attention/engine.hpp has the semantics): pass 1
// decode_partial, pass 2 decode_reduce. OpenCL C 1.2 without cl_khr_fp16: arrays are read
// and written through common/clc.h; all math is f32 with logits in base 2 (log2 e folded
// into the query scale).
//
// Compile-time (-D): T work-items per group, BK keys per tile, R query rows per group (query
// heads of one kv head times query tokens), BQ query tokens per group, DMAX head_dim rounded up
// to 32, 64, 128 or 256. Everything else (dtype, layout, sizes, options) is a kernel argument, so
// one program serves every dtype and shape of a config: PoCL takes seconds per program.
//
// Pass 1 per group (split, kv head, query block): stage the R query rows; for each tile of BK
// keys of its chunk, resolve the tile's row addresses (through the block table when paged),
// stage K and V as f32, score R x BK, update each row's running max and sum, and accumulate
// P V into registers (work-item i owns the four-element groups i, i + T, ... of the R x DMAX
// block).

#define NEG (-1.0e30f)
#define D4 (DMAX / 4)
#define KS4 (D4 + 1)
#define ACC4 EJK_CEIL_DIV(R * D4, T)
#define SS (BK + 1)

// Flags.
#define PAGED 1
#define HAS_BEGIN 2
#define VARLEN 4
#define SINKS 8

#include "common/clc.h"

// Four elements from i, a multiple of 4: vload needs only element alignment.
float4 load4(__global const uchar* base, int dtype, size_t i) {
  if (dtype == 0) return vload4(i / 4, (__global const float*)base);
  if (dtype == 1) return vload_half4(i / 4, (__global const half*)base);
  return EJK_BF16_TO_F32V(4, vload4(i / 4, (__global const ushort*)base));
}

// The query block `blk`: its sequence, first token and token count; false when it holds none.
bool find_block(int blk, int flags, int num_seqs, __global const int* q_loc, int* seq, int* t0, int* nq, int* qlen) {
  if (!(flags & VARLEN)) {
    *seq = blk;
    *t0 = blk;
    *nq = 1;
    *qlen = 1;
    return blk < num_seqs;
  }
  // Sequence s owns the blocks from q_loc[s] / BQ + s on: the largest s whose first is <= blk.
  int lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (q_loc[mid] / BQ + mid <= blk) lo = mid;
    else hi = mid - 1;
  }
  const int s = lo, first = q_loc[s] / BQ + s;
  const int start = q_loc[s] + (blk - first) * BQ, end = q_loc[s + 1];
  *seq = s;
  *t0 = start;
  *nq = min(BQ, end - start);
  *qlen = end - q_loc[s];
  return blk >= first && start < end;
}

// The query block `blk` (find_block) and its rows' visible keys [lo_row, hi_row): query i of a
// sequence's qlen tokens sits at pos = kv_end - qlen + i and sees kv_begin..pos, or the last
// `window` of them; rows past the block's nq tokens see none. Rows are (token, query head of
// kv head) pairs, G heads a token. A block that holds no query gets nq = 0 and runs to the end
// with nothing to do: a return ahead of the barriers is what PoCL's work-group compiler may get
// wrong (docs/testing.md).
void block_rows(int blk, int tid, int G, int flags, int num_seqs, int window, __global const int* q_loc,
                __global const int* kv_begin, __global const int* kv_end, __local int* lo_row, __local int* hi_row,
                int* s, int* t0, int* nq) {
  int qlen;
  if (!find_block(blk, flags, num_seqs, q_loc, s, t0, nq, &qlen)) {
    *s = 0;
    *nq = 0;
  }
  const bool any = *nq > 0;
  const int kve = any ? kv_end[*s] : 0;
  const int kvb = any && (flags & HAS_BEGIN) ? kv_begin[*s] : 0;
  const int i0 = any ? *t0 - ((flags & VARLEN) ? q_loc[*s] : *s) : 0;
  for (int r = tid; r < R; r += T) {
    const int qi = r / G;
    const int pos = kve - qlen + i0 + qi;
    const bool valid = qi < *nq;
    lo_row[r] = valid ? (window > 0 ? max(kvb, pos - window + 1) : kvb) : 0;
    hi_row[r] = valid ? pos + 1 : 0;
  }
}

// Four consecutive elements of a row from element i (zeros past n): one vector load where n is
// a multiple of 4 (rows then start at multiples of 4), else element by element.
float4 load_quad(__global const uchar* base, int dtype, size_t i, int d, int n) {
  if ((n & 3) == 0) return load4(base, dtype, i);
  float4 x = (float4)(0.0f);
  x.x = ejk_load(base, i, dtype);
  if (d + 1 < n) x.y = ejk_load(base, i + 1, dtype);
  if (d + 2 < n) x.z = ejk_load(base, i + 2, dtype);
  if (d + 3 < n) x.w = ejk_load(base, i + 3, dtype);
  return x;
}

__kernel __attribute__((reqd_work_group_size(T, 1, 1))) void decode_partial(
    __global const uchar* q, __global const uchar* k, __global const uchar* v, __global const int* tables,
    __global const int* kv_begin, __global const int* kv_end, __global const int* q_loc, __global float* part_acc,
    __global float* part_ml, int dtype, int flags, int num_seqs, int heads, int kv_heads, int head_dim,
    int block_size, int max_blocks, int num_blocks, int seq_len, int splits, int window, float qscale, float cap2) {
  // Rows of four elements: every shared read and write is a float4, and with an odd float4 stride
  // the eight work-items of a quarter-warp reading eight key rows hit distinct banks.
  __local float4 qs[R * D4];
  __local float4 ks[BK * KS4];
  __local float4 vs[BK * D4];
  __local float ss[R * SS];
  __local float m_row[R], l_row[R], alpha[R];
  __local int lo_row[R], hi_row[R];
  __local long key_at[BK];

  const int split = get_group_id(0), g = get_group_id(1), blk = get_group_id(2);
  const int tid = get_local_id(0);
  const int G = heads / kv_heads;
  int s, t0, nq;
  block_rows(blk, tid, G, flags, num_seqs, window, q_loc, kv_begin, kv_end, lo_row, hi_row, &s, &t0, &nq);
  const int nd4 = (head_dim + 3) / 4;

  for (int r = tid; r < R; r += T) {
    m_row[r] = NEG;
    l_row[r] = 0.0f;
  }
  for (int e = tid; e < R * D4; e += T) {
    const int r = e / D4, d = (e % D4) * 4, qi = r / G;
    const int h = g * G + r % G;
    float4 x = (float4)(0.0f);
    if (qi < nq && d < head_dim)
      x = load_quad(q, dtype, ((size_t)(t0 + qi) * heads + h) * head_dim + d, d, head_dim) * qscale;
    qs[e] = x;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  // Keys of the block's rows: lo grows and hi grows with the token, so the first and last rows bound them.
  const int u0 = lo_row[0], u1 = nq > 0 ? hi_row[(nq - 1) * G] : u0;
  const int span = max(0, u1 - u0);
  const int chunk = EJK_ROUND_UP(EJK_CEIL_DIV(span, splits), BK);
  const int c0 = u0 + split * chunk, c1 = min(c0 + chunk, u1);

  float4 acc[ACC4];
  for (int i = 0; i < ACC4; ++i) acc[i] = (float4)(0.0f);

  for (int base = c0; base < c1; base += BK) {
    if (tid < BK) {
      const int t = base + tid;
      long at = -1;
      if (t < c1) {
        // Unchecked index arrays (the API's check_indices off) stay inside the table and the cache.
        const int tc = clamp(t, 0, ((flags & PAGED) ? max_blocks * block_size : seq_len) - 1);
        if (flags & PAGED) {
          const int page = clamp(tables[(size_t)s * max_blocks + tc / block_size], 0, num_blocks - 1);
          at = (((long)page * kv_heads + g) * block_size + tc % block_size) * head_dim;
        } else {
          at = (((long)s * seq_len + tc) * kv_heads + g) * head_dim;
        }
      }
      key_at[tid] = at;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = tid; e < BK * D4; e += T) {
      const int j = e / D4, d4 = e % D4, d = d4 * 4;
      const long at = key_at[j];
      float4 kx = (float4)(0.0f), vx = (float4)(0.0f);
      if (at >= 0 && d < head_dim) {
        kx = load_quad(k, dtype, (size_t)(at + d), d, head_dim);
        vx = load_quad(v, dtype, (size_t)(at + d), d, head_dim);
      }
      ks[j * KS4 + d4] = kx;
      vs[e] = vx;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = tid; e < R * BK; e += T) {
      const int r = e / BK, j = e % BK, t = base + j;
      float z = NEG;
      if (t >= lo_row[r] && t < hi_row[r]) {
        float4 x = (float4)(0.0f);
        for (int d4 = 0; d4 < nd4; ++d4) x = mad(qs[r * D4 + d4], ks[j * KS4 + d4], x);
        const float u = (x.x + x.y) + (x.z + x.w);
        z = cap2 > 0.0f ? cap2 * tanh(u) : u;
      }
      ss[r * SS + j] = z;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int r = tid; r < R; r += T) {
      float mx = NEG;
      for (int j = 0; j < BK; ++j) mx = fmax(mx, ss[r * SS + j]);
      const float mn = fmax(m_row[r], mx);
      const float a = exp2(m_row[r] - mn);
      float sum = 0.0f;
      for (int j = 0; j < BK; ++j) {
        const float z = ss[r * SS + j];
        const float p = z <= NEG * 0.5f ? 0.0f : exp2(z - mn);
        ss[r * SS + j] = p;
        sum += p;
      }
      l_row[r] = l_row[r] * a + sum;
      m_row[r] = mn;
      alpha[r] = a;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = 0; i < ACC4; ++i) {
      const int o = tid + i * T;
      if (o < R * D4) {
        const int r = o / D4, d4 = o % D4;
        float4 x = acc[i] * alpha[r];
        for (int j = 0; j < BK; ++j) x = mad((float4)(ss[r * SS + j]), vs[j * D4 + d4], x);
        acc[i] = x;
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (int i = 0; i < ACC4; ++i) {
    const int o = tid + i * T;
    if (o < R * D4) {
      const int r = o / D4, d = (o % D4) * 4, qi = r / G;
      if (qi < nq && d < head_dim) {
        __global float* dst = part_acc + (((size_t)(t0 + qi) * heads + g * G + r % G) * splits + split) * head_dim + d;
        dst[0] = acc[i].x;
        if (d + 1 < head_dim) dst[1] = acc[i].y;
        if (d + 2 < head_dim) dst[2] = acc[i].z;
        if (d + 3 < head_dim) dst[3] = acc[i].w;
      }
    }
  }
  for (int r = tid; r < R; r += T) {
    const int qi = r / G;
    if (qi < nq) {
      const size_t at = ((size_t)(t0 + qi) * heads + g * G + r % G) * splits + split;
      part_ml[2 * at] = m_row[r];
      part_ml[2 * at + 1] = l_row[r];
    }
  }
}

// One work-item per (row = token * heads + head, d): merge the splits by log-sum-exp.
__kernel void decode_reduce(__global const float* part_acc, __global const float* part_ml, __global const uchar* sinks,
                            __global uchar* out, __global const int* q_loc, int dtype, int sinks_dtype, int flags,
                            int num_seqs, int tokens, int heads, int head_dim, int splits) {
  const int d = get_global_id(0);
  const size_t row = get_global_id(1);
  if (d >= head_dim) return;
  const int owned = (flags & VARLEN) ? q_loc[num_seqs] : tokens;
  if (row >= (size_t)owned * heads) return;
  const int h = row % heads;
  __global const float* ml = part_ml + row * splits * 2;
  const float sink = (flags & SINKS) ? ejk_load(sinks, h, sinks_dtype) * 1.44269504088896340736f : NEG;
  float M = sink;
  for (int c = 0; c < splits; ++c) M = fmax(M, ml[2 * c]);
  float L = (flags & SINKS) ? exp2(sink - M) : 0.0f, a = 0.0f;
  for (int c = 0; c < splits; ++c) {
    const float w = exp2(ml[2 * c] - M);
    L += ml[2 * c + 1] * w;
    a += part_acc[(row * splits + c) * head_dim + d] * w;
  }
  // No key seen: a is 0 whatever L holds (a sink alone).
  ejk_store(out, row * head_dim + d, dtype, L > 0.0f ? a / L : 0.0f);
}

#ifdef KPT
// Pass 1, register-streamed (decode_stream): the same result as decode_partial, with K and V
// never staged in local memory. Work-item tid owns the 8-element slice c = tid % DS of head_dim
// and the keys kg, kg + KG, ... of each tile (kg = tid / DS; KPT keys each, BKS a tile), and
// holds the raw words of the next tile's keys while it works on this one: a paged cache's reads
// are latency-bound, and loads in flight across the whole tile loop are what keeps the memory
// busy. Partial dots meet in local memory once per tile; every (row, key) score is one work-item;
// P V accumulates per work-item over its own keys and the key groups' sums meet once at the end.
// Three barriers a tile: each local array's next write comes after a barrier that all its
// readers have passed. Every work-item keeps every row's running maximum (m), so that the
// max pass reads it privately. DT (0 f32, 1 f16, 2 bf16), PG (paged) and VEC (head_dim a
// multiple of 8: whole aligned slices) are compile-time here: the raw words' size, their
// conversion and the key addresses are in the loop's every step, and registers set occupancy.
#define DS (DMAX / 8)
#define KG (T / DS)
#define BKS (KG * KPT)
#define SB (BKS + 1)
#define WORK_DOTS (R * BKS * (DS + 1))
#define WORK_RED (KG * R * (DMAX + 1))
#define WORK (WORK_DOTS > WORK_RED ? WORK_DOTS : WORK_RED)
#if DT == 0
typedef float8 raw_t;
#else
typedef uint4 raw_t;
#endif

// Eight elements from element i, the slice starting at d of a row of n, element by element
// (zeros past n): rows whose length is not a multiple of 8, where slices are not aligned.
raw_t load_raw(__global const uchar* base, size_t i, int d, int n) {
#if DT == 0
  __global const float* p = (__global const float*)base;
  float x[8];
  for (int e = 0; e < 8; ++e) x[e] = d + e < n ? p[i + e] : 0.0f;
  return vload8(0, x);
#else
  __global const ushort* p = (__global const ushort*)base;
  ushort x[8];
  for (int e = 0; e < 8; ++e) x[e] = d + e < n ? p[i + e] : (ushort)0;
  return as_uint4(vload8(0, x));
#endif
}

// The f32 values of raw words held in a private variable: a macro on the variable itself, since
// a copy into a function argument made NVIDIA's compiler split the 16-byte loads feeding it.
#if DT == 0
#define TO_F8(w) (w)
#elif DT == 1
#define TO_F8(w) vload_half8(0, (const half*)&(w))
#else
#define TO_F8(w) EJK_BF16_TO_F32V(8, as_ushort8(w))
#endif

float sum8(float8 x) { return ((x.s0 + x.s1) + (x.s2 + x.s3)) + ((x.s4 + x.s5) + (x.s6 + x.s7)); }

__kernel __attribute__((reqd_work_group_size(T, 1, 1))) void decode_stream(
    __global const raw_t* q, __global const raw_t* k, __global const raw_t* v, __global const int* tables,
    __global const int* kv_begin, __global const int* kv_end, __global const int* q_loc, __global float* part_acc,
    __global float* part_ml, int dtype, int flags, int num_seqs, int heads, int kv_heads, int head_dim,
    int block_size, int max_blocks, int num_blocks, int seq_len, int splits, int window, float qscale, float cap2) {
  __local float work[WORK];  // partial dots [R][BKS][DS + 1] in the loop; key groups' sums [KG][R][DMAX + 1] after
  __local float sc[R * SB], pb[R * SB];
  __local float m_new[R];  // rows' maxima after this tile
  __local int lo_row[R], hi_row[R];

  const int split = get_group_id(0), g = get_group_id(1), blk = get_group_id(2);
  const int tid = get_local_id(0), c = tid % DS, kg = tid / DS;
  const int G = R / BQ;  // heads / kv_heads, known here at compile time
  int s, t0, nq;
  block_rows(blk, tid, G, flags, num_seqs, window, q_loc, kv_begin, kv_end, lo_row, hi_row, &s, &t0, &nq);
  barrier(CLK_LOCAL_MEM_FENCE);
  const int u0 = lo_row[0], u1 = nq > 0 ? hi_row[(nq - 1) * G] : u0;
  const int span = max(0, u1 - u0);
  const int chunk = EJK_ROUND_UP(EJK_CEIL_DIV(span, splits), BKS);
  const int c0 = u0 + split * chunk, c1 = min(c0 + chunk, u1);
  const int lim = ((flags & PAGED) ? max_blocks * block_size : seq_len) - 1;
  const int d = c * 8;
  const bool live = d < head_dim;

  // This work-item's slice of every row's query, scaled.
  float8 qr[R];
  for (int r = 0; r < R; ++r) {
    const int qi = r / G;
    const size_t at = ((size_t)(t0 + qi) * heads + g * G + r % G) * head_dim + d;
    qr[r] = (float8)(0.0f);
#if VEC
    if (qi < nq && d < head_dim) {
      const raw_t w = q[at / 8];
      qr[r] = TO_F8(w) * qscale;
    }
#else
    if (qi < nq && d < head_dim) {
      const raw_t w = load_raw((__global const uchar*)q, at, d, head_dim);
      qr[r] = TO_F8(w) * qscale;
    }
#endif
  }
  float8 acc[R];
  float m[R], l[R];
  for (int r = 0; r < R; ++r) acc[r] = (float8)(0.0f), m[r] = NEG, l[r] = 0.0f;

  // The raw words of the tile from B0 into KW, VW (zeros past c1). Page sizes are mostly powers
  // of two: a shift and a mask then stand for the division.
  const int bs_shift = (block_size & (block_size - 1)) == 0 ? 31 - clz(block_size) : -1;
#if PG
#define KEY_ROW(tc)                                                                              \
  ((clamp(tables[s * max_blocks + (bs_shift >= 0 ? (tc) >> bs_shift : (tc) / block_size)], 0, num_blocks - 1) * \
        kv_heads + g) * block_size +                                                             \
   (bs_shift >= 0 ? (tc) & (block_size - 1) : (tc) % block_size))
#else
#define KEY_ROW(tc) ((s * seq_len + (tc)) * kv_heads + g)
#endif
#if VEC
#define KEY_LOAD(src, row) (src)[(row) * (head_dim / 8) + c]
#else
#define KEY_LOAD(src, row) load_raw((__global const uchar*)(src), (size_t)(row) * head_dim + d, d, head_dim)
#endif
#define LOAD_TILE(B0, KW, VW)                                                                    \
  for (int i = 0; i < KPT; ++i) {                                                                \
    const int t = (B0) + kg + KG * i;                                                            \
    KW[i] = (raw_t)(0);                                                                          \
    VW[i] = (raw_t)(0);                                                                          \
    if (t < c1 && live) {                                                                        \
      /* Unchecked index arrays (the API's check_indices off) stay inside the table and cache. */ \
      const int tc = clamp(t, 0, lim);                                                           \
      const int row = KEY_ROW(tc); /* the key's row of head_dim elements in the cache */         \
      KW[i] = KEY_LOAD(k, row);                                                                  \
      VW[i] = KEY_LOAD(v, row);                                                                  \
    }                                                                                            \
  }
  raw_t kw[KPT], vw[KPT], kn[KPT], vn[KPT];
  LOAD_TILE(c0, kw, vw)
  for (int base = c0; base < c1; base += BKS) {
    LOAD_TILE(base + BKS, kn, vn)
    for (int i = 0; i < KPT; ++i) {
      const float8 kf = TO_F8(kw[i]);
      const int j = kg + KG * i;
      for (int r = 0; r < R; ++r) work[(r * BKS + j) * (DS + 1) + c] = sum8(qr[r] * kf);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = tid; e < R * BKS; e += T) {
      const int r = e / BKS, j = e % BKS, t = base + j;
      float z = NEG;
      if (t < c1 && t >= lo_row[r] && t < hi_row[r]) {
        float u = 0.0f;
        for (int cc = 0; cc < DS; ++cc) u += work[(r * BKS + j) * (DS + 1) + cc];
        z = cap2 > 0.0f ? cap2 * tanh(u) : u;
      }
      sc[r * SB + j] = z;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = tid; e < R * BKS; e += T) {
      const int r = e / BKS, j = e % BKS;
      float mx = NEG;
      for (int jj = 0; jj < BKS; ++jj) mx = fmax(mx, sc[r * SB + jj]);
      const float mn = fmax(m[r], mx);
      const float z = sc[r * SB + j];
      pb[r * SB + j] = z <= NEG * 0.5f ? 0.0f : exp2(z - mn);
      if (j == 0) m_new[r] = mn;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int r = 0; r < R; ++r) {
      const float mn = m_new[r], a = exp2(m[r] - mn);
      m[r] = mn;
      l[r] *= a;
      acc[r] *= a;
    }
    for (int i = 0; i < KPT; ++i) {
      const float8 vf = TO_F8(vw[i]);
      const int j = kg + KG * i;
      for (int r = 0; r < R; ++r) {
        const float p = pb[r * SB + j];
        l[r] += p;
        acc[r] = mad((float8)(p), vf, acc[r]);
      }
    }
    for (int i = 0; i < KPT; ++i) {
      kw[i] = kn[i];
      vw[i] = vn[i];
    }
  }
  // The loop's last reads of `work` came before its last barrier: the sums may overwrite it now.
  for (int r = 0; r < R; ++r) {
    __local float* o = work + (kg * R + r) * (DMAX + 1);
    vstore8(acc[r], 0, o + d);
    if (c == 0) o[DMAX] = l[r];
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int e = tid; e < R * (DMAX + 1); e += T) {
    const int r = e / (DMAX + 1), dd = e % (DMAX + 1), qi = r / G;
    if (qi >= nq || (dd >= head_dim && dd < DMAX)) continue;
    float x = 0.0f;
    for (int gg = 0; gg < KG; ++gg) x += work[(gg * R + r) * (DMAX + 1) + dd];
    const size_t at = ((size_t)(t0 + qi) * heads + g * G + r % G) * splits + split;
    if (dd < head_dim) {
      part_acc[at * head_dim + dd] = x;
    } else {
      part_ml[2 * at] = m[r];
      part_ml[2 * at + 1] = x;
    }
  }
}
#endif
