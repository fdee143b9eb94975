// The decode engine on Vulkan (decode_attention/engine.hpp has the semantics), included by
// decode_attention_<pass>[16].comp with PASS (DA_PARTIAL, DA_STREAM, DA_COOP, DA_REDUCE) and ELEM16 (0:
// every float array f32; 1: 16-bit storage, f32/f16/bf16 by push constant). The design of
// decode_attention.cl. Pass 1 comes in two kinds, one workgroup per (split, kv head, query
// block) either way: DA_PARTIAL stages the query rows, then for each tile of BK keys resolves
// the rows' addresses (block table or contiguous), stages K and V as f32, scores, updates running
// max and sum (base 2), and accumulates P V in registers (invocation i owns the four-element
// output groups i, i + T, ... of the R x DMAX block); DA_STREAM (below) keeps K and V in
// registers. Pass 2 merges the splits by log-sum-exp. Geometry is specialization constants,
// everything else push constants, so one DA_PARTIAL pipeline serves every dtype and shape of a
// config.
#extension GL_EXT_control_flow_attributes : require
#if ELEM16
#extension GL_EXT_shader_16bit_storage : require
#endif
#include "common/vulkan.glsl"

#define DA_PARTIAL 0
#define DA_REDUCE 1
#define DA_STREAM 2
#define DA_COOP 3

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

layout(constant_id = 3) const uint T = 128;    // invocations (= local size x)
layout(constant_id = 4) const uint BK = 32;    // keys per tile
layout(constant_id = 5) const uint R = 4;      // query rows per workgroup
layout(constant_id = 6) const uint BQ = 1;     // query tokens per workgroup
layout(constant_id = 7) const uint DMAX = 128; // head_dim rounded up to 32, 64, 128, 256

const uint D4 = DMAX / 4u;
const uint KS4 = D4 + 1u;
const uint ACC4 = EJK_CEIL_DIV(R * D4, T);  // four-element accumulators per invocation
const uint SS = BK + 1;
const float NEG = -1.0e30;
const float LOG2E = 1.44269504088896340736;

const uint F_PAGED = 1u, F_BEGIN = 2u, F_VARLEN = 4u, F_SINKS = 8u;

layout(push_constant) uniform Push {
  uint dtype, sinks_dtype, flags, num_seqs;
  uint tokens, heads, kv_heads, head_dim;
  uint block_size, max_blocks, num_blocks, seq_len;
  uint splits;
  int window;
  float qscale, cap2;
  uint group_offset;  // first workgroup along the split dimension (z of pass 1, y of pass 2)
} pc;

bool flag(uint f) { return (pc.flags & f) != 0u; }

// q k v tables kv_begin kv_end q_loc sinks out | part_acc part_ml
layout(binding = 0) readonly buffer QF { float q_f[]; };
layout(binding = 1) readonly buffer KF { float k_f[]; };
layout(binding = 2) readonly buffer VF { float v_f[]; };
layout(binding = 3) readonly buffer Tables { int tables[]; };
layout(binding = 4) readonly buffer Begin { int kv_begin[]; };
layout(binding = 5) readonly buffer End { int kv_end[]; };
layout(binding = 6) readonly buffer QLoc { int q_loc[]; };
layout(binding = 7) readonly buffer SinksF { float sinks_f[]; };
layout(binding = 8) buffer OutF { float out_f[]; };
layout(binding = 9) buffer PartAcc { float part_acc[]; };
layout(binding = 10) buffer PartMl { float part_ml[]; };
// Queries, keys and values four elements at a time (index = element / 4, where head_dim % 4 == 0).
layout(binding = 0) readonly buffer QF4 { vec4 q_f4[]; };
layout(binding = 1) readonly buffer KF4 { vec4 k_f4[]; };
layout(binding = 2) readonly buffer VF4 { vec4 v_f4[]; };
#if ELEM16
layout(binding = 0) readonly buffer QU2 { uvec2 q_u2[]; };
layout(binding = 1) readonly buffer KU2 { uvec2 k_u2[]; };
layout(binding = 2) readonly buffer VU2 { uvec2 v_u2[]; };
layout(binding = 0) readonly buffer QH { uint16_t q_h[]; };
layout(binding = 1) readonly buffer KH { uint16_t k_h[]; };
layout(binding = 2) readonly buffer VH { uint16_t v_h[]; };
layout(binding = 7) readonly buffer SinksH { uint16_t sinks_h[]; };
layout(binding = 8) buffer OutH { uint16_t out_h[]; };

#define LOAD(name, i, dt) ((dt) == 0u ? name##_f[i] : EJK_LD16(name##_h, i, dt))
#define LOAD4(name, i4, dt) ((dt) == 0u ? name##_f4[i4] : ejk_decode16x4(name##_u2[i4], (dt)))
#define STORE(name, i, dt, x)        \
  if ((dt) == 0u) name##_f[i] = (x); \
  else EJK_ST16(name##_h, i, dt, x)
#else
#define LOAD(name, i, dt) (name##_f[i])
#define LOAD4(name, i4, dt) (name##_f4[i4])
#define STORE(name, i, dt, x) name##_f[i] = (x)
#endif

#if PASS == DA_PARTIAL || PASS == DA_STREAM || PASS == DA_COOP

shared int lo_row[R], hi_row[R];  // each row's visible keys [lo, hi)

// The query block blk: its sequence s, first token t0 and tokens nq (at most BQ), and each row's
// visible keys [lo_row, hi_row): query i of a sequence's qlen tokens sits at pos = kv_end - qlen
// + i and sees kv_begin..pos, or the last `window` of them; rows (query heads of the kv head
// times tokens, G heads a token) past the block's nq tokens see none. False when the block holds
// no query, which the whole workgroup learns alike: it returns before any barrier.
bool block_rows(uint blk, uint G, out int s, out int t0, out int nq) {
  int qlen;
  s = 0;
  t0 = 0;
  nq = 0;
  if (!flag(F_VARLEN)) {
    s = int(blk);
    t0 = s;
    nq = 1;
    qlen = 1;
    if (s >= int(pc.num_seqs)) return false;
  } else {
    // Sequence s owns the blocks from q_loc[s] / BQ + s on: the largest s whose first is <= blk.
    int lo = 0, hi = int(pc.num_seqs) - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (q_loc[mid] / int(BQ) + mid <= int(blk)) lo = mid;
      else hi = mid - 1;
    }
    s = lo;
    const int first = q_loc[s] / int(BQ) + s;
    t0 = q_loc[s] + (int(blk) - first) * int(BQ);
    const int end = q_loc[s + 1];
    if (int(blk) < first || t0 >= end) return false;
    nq = min(int(BQ), end - t0);
    qlen = end - q_loc[s];
  }
  const int kve = kv_end[s];
  const int kvb = flag(F_BEGIN) ? kv_begin[s] : 0;
  const int i0 = t0 - (flag(F_VARLEN) ? q_loc[s] : s);
  for (uint r = gl_LocalInvocationID.x; r < R; r += T) {
    const int qi = int(r / G);
    const int pos = kve - qlen + i0 + qi;
    const bool valid = qi < nq;
    lo_row[r] = valid ? (pc.window > 0 ? max(kvb, pos - pc.window + 1) : kvb) : 0;
    hi_row[r] = valid ? pos + 1 : 0;
  }
  return true;
}

// This split's keys [c0, c1), after block_rows and a barrier: the block's keys cut into `splits`
// chunks of whole tiles of `tile` keys. lo and hi grow with the token, so the first and last
// rows bound the block's keys.
void split_keys(uint split, int nq, uint G, uint tile, out int c0, out int c1) {
  const int u0 = lo_row[0], u1 = hi_row[uint(nq - 1) * G];
  const int span = max(0, u1 - u0);
  const int chunk = EJK_ROUND_UP(EJK_CEIL_DIV(span, int(pc.splits)), int(tile));
  c0 = u0 + int(split) * chunk;
  c1 = min(c0 + chunk, u1);
}

// The cache row (of head_dim elements) that holds key t of sequence s and kv head g, in two
// steps where the cache is paged: key_page reads the block table, page_row places the key in its
// page. Unchecked index arrays (the API's check_indices off) stay inside the table and the cache:
// t is clamped into the table's reach (or the row), the page into the cache. Page sizes are
// mostly powers of two: a shift and a mask then stand for the division. The stream pass knows
// the power when its pipeline is built (PAGE_LOG2, 32 where there is none), so only one of the
// two is compiled there: chosen at run time both were, and its paged loop ran 16 divisions
// emulated in floating point a tile (988 instructions to the contiguous cache's 699 on an H200).
#if PASS == DA_STREAM || PASS == DA_COOP
layout(constant_id = 11) const uint PAGE_LOG2 = 32u;
#endif
uint clamp_key(int t, bool paged) {
  return uint(clamp(t, 0, int(paged ? pc.max_blocks * pc.block_size : pc.seq_len) - 1));
}

bool pow2_pages() {
#if PASS == DA_STREAM || PASS == DA_COOP
  return PAGE_LOG2 < 32u;
#else
  return (pc.block_size & (pc.block_size - 1u)) == 0u;
#endif
}

uint page_shift() {
#if PASS == DA_STREAM || PASS == DA_COOP
  return PAGE_LOG2;
#else
  return uint(findLSB(pc.block_size));
#endif
}

uint key_page(uint s, int t) {
  const uint tc = clamp_key(t, true);
  const uint b = pow2_pages() ? tc >> page_shift() : tc / pc.block_size;
  return uint(clamp(tables[s * pc.max_blocks + b], 0, int(pc.num_blocks) - 1));
}

uint page_row(uint page, uint g, int t) {
  const uint tc = clamp_key(t, true);
  const uint row = pow2_pages() ? tc & (pc.block_size - 1u) : tc % pc.block_size;
  return (page * pc.kv_heads + g) * pc.block_size + row;
}

uint key_row(uint s, uint g, int t, bool paged) {
  if (!paged) return (s * pc.seq_len + clamp_key(t, false)) * pc.kv_heads + g;
  return page_row(key_page(s, t), g, t);
}

// The query (and output) row of the workgroup's row r: token t0 + r / G, head g * G + r % G.
uint row_at(int t0, uint r, uint G, uint g) { return (uint(t0) + r / G) * pc.heads + g * G + r % G; }

#endif

#if PASS == DA_PARTIAL

// Rows of four elements: every shared read and write is a vec4, and with an odd vec4 stride
// the eight invocations of a quarter-warp reading eight key rows hit distinct banks.
shared vec4 qs[R * D4];
shared vec4 ks[BK * KS4];
shared vec4 vs[BK * D4];
shared float ss[R * SS];
shared float m_row[R], l_row[R], alpha[R];
shared int key_at[BK];  // first element of each key row of the tile, -1 past the chunk

// Four consecutive elements of a row from element i (zeros past D): one vector load where D is a
// multiple of 4 (rows then start at multiples of 4), else element by element.
#define LOAD_QUAD(name, i, d, x)                                              \
  if ((pc.head_dim & 3u) == 0u) {                                            \
    x = LOAD4(name, (i) / 4u, pc.dtype);                                     \
  } else {                                                                   \
    for (uint c_ = 0u; c_ < 4u; ++c_)                                        \
      if ((d) + c_ < pc.head_dim) x[c_] = LOAD(name, (i) + c_, pc.dtype);    \
  }

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint split = gl_WorkGroupID.x, g = gl_WorkGroupID.y, blk = gl_WorkGroupID.z + pc.group_offset;
  const uint G = pc.heads / pc.kv_heads, D = pc.head_dim;
  int s, t0, nq;
  if (!block_rows(blk, G, s, t0, nq)) return;
  const uint nd4 = (D + 3u) / 4u;

  for (uint r = tid; r < R; r += T) {
    m_row[r] = NEG;
    l_row[r] = 0.0;
  }
  for (uint e = tid; e < R * D4; e += T) {
    const uint r = e / D4, d = (e % D4) * 4u;
    vec4 x = vec4(0.0);
    if (int(r / G) < nq && d < D) {
      LOAD_QUAD(q, row_at(t0, r, G, g) * D + d, d, x)
    }
    qs[e] = x * pc.qscale;
  }
  barrier();
  int c0, c1;
  split_keys(split, nq, G, BK, c0, c1);

  vec4 acc[ACC4];
  [[unroll]] for (uint i = 0; i < ACC4; ++i) acc[i] = vec4(0.0);

  for (int base = c0; base < c1; base += int(BK)) {
    if (tid < BK) {
      const int t = base + int(tid);
      key_at[tid] = t < c1 ? int(key_row(uint(s), g, t, flag(F_PAGED)) * D) : -1;
    }
    barrier();
    for (uint e = tid; e < BK * D4; e += T) {
      const uint j = e / D4, d4 = e % D4, d = d4 * 4u;
      const int at = key_at[j];
      vec4 kx = vec4(0.0), vx = vec4(0.0);
      if (at >= 0 && d < D) {
        LOAD_QUAD(k, uint(at) + d, d, kx)
        LOAD_QUAD(v, uint(at) + d, d, vx)
      }
      ks[j * KS4 + d4] = kx;
      vs[e] = vx;
    }
    barrier();
    for (uint e = tid; e < R * BK; e += T) {
      const uint r = e / BK, j = e % BK;
      const int t = base + int(j);
      float z = NEG;
      if (t >= lo_row[r] && t < hi_row[r]) {
        vec4 x = vec4(0.0);
        for (uint d4 = 0; d4 < nd4; ++d4) x = fma(qs[r * D4 + d4], ks[j * KS4 + d4], x);
        const float u = (x.x + x.y) + (x.z + x.w);
        z = pc.cap2 > 0.0 ? pc.cap2 * tanh(u) : u;
      }
      ss[r * SS + j] = z;
    }
    barrier();
    for (uint r = tid; r < R; r += T) {
      float mx = NEG;
      for (uint j = 0; j < BK; ++j) mx = max(mx, ss[r * SS + j]);
      const float mn = max(m_row[r], mx);
      const float a = exp2(m_row[r] - mn);
      float sum = 0.0;
      for (uint j = 0; j < BK; ++j) {
        const float z = ss[r * SS + j];
        const float p = z <= NEG * 0.5 ? 0.0 : exp2(z - mn);
        ss[r * SS + j] = p;
        sum += p;
      }
      l_row[r] = l_row[r] * a + sum;
      m_row[r] = mn;
      alpha[r] = a;
    }
    barrier();
    [[unroll]] for (uint i = 0; i < ACC4; ++i) {
      const uint o = tid + i * T;
      if (o < R * D4) {
        const uint r = o / D4, d4 = o % D4;
        vec4 x = acc[i] * alpha[r];
        for (uint j = 0; j < BK; ++j) x = fma(vec4(ss[r * SS + j]), vs[j * D4 + d4], x);
        acc[i] = x;
      }
    }
    barrier();
  }
  [[unroll]] for (uint i = 0; i < ACC4; ++i) {
    const uint o = tid + i * T;
    if (o < R * D4) {
      const uint r = o / D4, d = (o % D4) * 4u;
      const int qi = int(r / G);
      if (qi < nq && d < D) {
        const uint dst = (row_at(t0, r, G, g) * pc.splits + split) * D + d;
        for (uint c = 0u; c < 4u; ++c)
          if (d + c < D) part_acc[dst + c] = acc[i][c];
      }
    }
  }
  for (uint r = tid; r < R; r += T) {
    const int qi = int(r / G);
    if (qi < nq) {
      const uint at = row_at(t0, r, G, g) * pc.splits + split;
      part_ml[2u * at] = m_row[r];
      part_ml[2u * at + 1u] = l_row[r];
    }
  }
}

#elif PASS == DA_STREAM

// Pass 1 register-streamed, as decode_attention.cl's decode_stream: K and V are never staged in
// shared memory. Invocation tid owns the 8-element slice c = tid % DS of every row and the keys
// kg, kg + KG, ... of each tile (kg = tid / DS; KPT keys each, BK a tile), and holds the raw
// 16-byte words of the next tile's keys and values while it works on this one: a paged cache's
// reads are latency-bound, and loads in flight across the whole tile loop are what keeps the
// memory busy. A paged cache's page numbers are read one tile further ahead still, so that no
// tile's key and value loads wait for a block-table read: each would otherwise add a full memory
// latency to every tile. Partial dots meet in shared memory once per tile, every (row, key)
// score is one invocation, P V accumulates per invocation over its own keys, and the key groups'
// sums meet once at the end. Three barriers a tile: each shared array's next write comes after
// a barrier that all its readers have passed. Only shared memory and barriers join invocations,
// so the subgroup size does not matter. The storage dtype, the layout and whether head_dim is a
// multiple of 8 are specialization constants: the raw words' count, their conversion and the key
// addresses are in every step of the loop, and registers set occupancy. The words are read as
// uvec4 whatever the dtype, so this module needs no 16-bit storage.
layout(constant_id = 8) const uint DT = 1;   // storage dtype: 0 f32, 1 f16, 2 bf16
layout(constant_id = 9) const uint PG = 1;   // 1: paged cache, 0: contiguous
layout(constant_id = 10) const uint VEC = 1; // 1: head_dim a multiple of 8 (whole, aligned slices)

const uint DS = DMAX / 8u;                   // slices of a row
const uint KG = T / DS;                      // key groups
const uint KPT = BK / KG;                    // keys per invocation and tile
const uint SB = BK + 1u;
const uint WPS = DT == 0u ? 2u : 1u;         // 16-byte words of a slice
const uint EPW = DT == 0u ? 4u : 8u;         // elements of a 16-byte word
const uint WORK_DOTS = R * BK * (DS + 1u);   // partial dots [R][BK][DS + 1]
const uint WORK_RED = KG * R * (DMAX + 1u);  // key groups' sums [KG][R][DMAX + 1]
const uint WORK = WORK_DOTS > WORK_RED ? WORK_DOTS : WORK_RED;

layout(binding = 0) readonly buffer QU4 { uvec4 q_u4[]; };
layout(binding = 1) readonly buffer KU4 { uvec4 k_u4[]; };
layout(binding = 2) readonly buffer VU4 { uvec4 v_u4[]; };
layout(binding = 0) readonly buffer QW { uint q_w[]; };
layout(binding = 1) readonly buffer KW { uint k_w[]; };
layout(binding = 2) readonly buffer VW { uint v_w[]; };

shared float work[WORK];  // partial dots in the loop, the key groups' sums after it
shared float sc[R * SB], pb[R * SB];  // scores, probabilities
shared float m_sh[2u * R];  // rows' running maxima before and after a tile, alternating

// Element i's bits of q (0), k (1) or v (2).
uint element_bits(uint which, uint i) {
  const uint w = DT == 0u ? i : i >> 1u;
  const uint x = which == 0u ? q_w[w] : which == 1u ? k_w[w] : v_w[w];
  return DT == 0u ? x : (x >> ((i & 1u) * 16u)) & 0xffffu;
}

// Word `word` of the slice at element i (d its place in a row), element by element, zeros past
// head_dim: rows whose length is not a multiple of 8, where slices are not aligned.
uvec4 gather_word(uint which, uint i, uint d, uint word) {
  const uint per = EPW / 4u;  // elements of a 32-bit component
  uvec4 x = uvec4(0u);
  [[unroll]] for (uint e = 0u; e < EPW; ++e) {
    const uint at = word * EPW + e;
    if (d + at < pc.head_dim) x[e / per] |= element_bits(which, i + at) << ((e % per) * 16u);
  }
  return x;
}

// The raw words of the slice at element i (d its place in a row) into W[o], W[o + 1] ...
#define LOAD_SLICE(name, which, i, d, W, o)                                       \
  [[unroll]] for (uint w_ = 0u; w_ < WPS; ++w_) {                                 \
    if (VEC != 0u) W[(o) + w_] = name##_u4[(i) / EPW + w_];                       \
    else W[(o) + w_] = gather_word(which, i, d, w_);                              \
  }

// Elements 0-3 (h 0) or 4-7 (h 1) of a slice held as raw words from W[o].
#define SLICE_HALF(W, o, h) to_f32x4(W[(o) + (h) * (WPS - 1u)], h)
vec4 to_f32x4(uvec4 w, uint h) {
  if (DT == 0u) return uintBitsToFloat(w);
  return ejk_decode16x4(h == 0u ? w.xy : w.zw, DT);
}

void main() {
  const uint tid = gl_LocalInvocationID.x, c = tid % DS, kg = tid / DS;
  const uint split = gl_WorkGroupID.x, g = gl_WorkGroupID.y, blk = gl_WorkGroupID.z + pc.group_offset;
  const uint G = R / BQ, D = pc.head_dim;  // G: heads / kv_heads, known here at compile time
  int s, t0, nq;
  if (!block_rows(blk, G, s, t0, nq)) return;
  for (uint r = tid; r < R; r += T) m_sh[r] = NEG;
  barrier();
  int c0, c1;
  split_keys(split, nq, G, BK, c0, c1);
  const uint d = c * 8u;
  const bool live = d < D;

  // This invocation's slice of every row's query, scaled, and its accumulators.
  vec4 qlo[R], qhi[R], alo[R], ahi[R];
  float l[R];
  [[unroll]] for (uint r = 0u; r < R; ++r) {
    uvec4 w[WPS];
    [[unroll]] for (uint i = 0u; i < WPS; ++i) w[i] = uvec4(0u);
    if (int(r / G) < nq && live) {
      LOAD_SLICE(q, 0u, row_at(t0, r, G, g) * D + d, d, w, 0u)
    }
    qlo[r] = SLICE_HALF(w, 0u, 0u) * pc.qscale;
    qhi[r] = SLICE_HALF(w, 0u, 1u) * pc.qscale;
    alo[r] = vec4(0.0);
    ahi[r] = vec4(0.0);
    l[r] = 0.0;
  }

  // The pages of this invocation's keys of the tile from B0 into pg (paged caches; 0 past c1).
  uint pg[KPT];
#define LOAD_PAGES(B0)                                                            \
  [[unroll]] for (uint i = 0u; i < KPT; ++i) {                                    \
    const int t = (B0) + int(kg + KG * i);                                        \
    pg[i] = 0u;                                                                   \
    if (PG != 0u && t < c1 && live) pg[i] = key_page(uint(s), t);                 \
  }
  // The raw words of the tile from B0 into KW_, VW_ (zeros past c1); a paged cache's pages are
  // those LOAD_PAGES(B0) left in pg.
#define LOAD_TILE(B0, KW_, VW_)                                                   \
  [[unroll]] for (uint i = 0u; i < KPT; ++i) {                                    \
    const int t = (B0) + int(kg + KG * i);                                        \
    [[unroll]] for (uint w_ = 0u; w_ < WPS; ++w_) {                               \
      KW_[i * WPS + w_] = uvec4(0u);                                              \
      VW_[i * WPS + w_] = uvec4(0u);                                              \
    }                                                                             \
    if (t < c1 && live) {                                                         \
      const uint e_ =                                                             \
          (PG != 0u ? page_row(pg[i], g, t) : key_row(uint(s), g, t, false)) * D + d; \
      LOAD_SLICE(k, 1u, e_, d, KW_, i * WPS)                                      \
      LOAD_SLICE(v, 2u, e_, d, VW_, i * WPS)                                      \
    }                                                                             \
  }
  uvec4 kw[KPT * WPS], vw[KPT * WPS], kn[KPT * WPS], vn[KPT * WPS];
  LOAD_PAGES(c0)
  LOAD_TILE(c0, kw, vw)
  LOAD_PAGES(c0 + int(BK))
  uint cur = 0u;  // m_sh[cur * R + r]: row r's maximum before this tile
  for (int base = c0; base < c1; base += int(BK)) {
    // The next tile's keys and values with the pages read a tile ago, then the pages of the tile
    // after it.
    LOAD_TILE(base + int(BK), kn, vn)
    LOAD_PAGES(base + 2 * int(BK))
    [[unroll]] for (uint i = 0u; i < KPT; ++i) {
      const vec4 klo = SLICE_HALF(kw, i * WPS, 0u), khi = SLICE_HALF(kw, i * WPS, 1u);
      const uint j = kg + KG * i;
      [[unroll]] for (uint r = 0u; r < R; ++r) work[(r * BK + j) * (DS + 1u) + c] = dot(qlo[r], klo) + dot(qhi[r], khi);
    }
    barrier();
    for (uint e = tid; e < R * BK; e += T) {
      const uint r = e / BK, j = e % BK;
      const int t = base + int(j);
      float z = NEG;
      if (t < c1 && t >= lo_row[r] && t < hi_row[r]) {
        float u = 0.0;
        for (uint cc = 0u; cc < DS; ++cc) u += work[(r * BK + j) * (DS + 1u) + cc];
        z = pc.cap2 > 0.0 ? pc.cap2 * tanh(u) : u;
      }
      sc[r * SB + j] = z;
    }
    barrier();
    for (uint e = tid; e < R * BK; e += T) {
      const uint r = e / BK, j = e % BK;
      float mx = NEG;
      for (uint jj = 0u; jj < BK; ++jj) mx = max(mx, sc[r * SB + jj]);
      const float mn = max(m_sh[cur * R + r], mx);
      const float z = sc[r * SB + j];
      pb[r * SB + j] = z <= NEG * 0.5 ? 0.0 : exp2(z - mn);
      if (j == 0u) m_sh[(cur ^ 1u) * R + r] = mn;
    }
    barrier();
    [[unroll]] for (uint r = 0u; r < R; ++r) {
      const float a = exp2(m_sh[cur * R + r] - m_sh[(cur ^ 1u) * R + r]);
      l[r] *= a;
      alo[r] *= a;
      ahi[r] *= a;
    }
    [[unroll]] for (uint i = 0u; i < KPT; ++i) {
      const vec4 vlo = SLICE_HALF(vw, i * WPS, 0u), vhi = SLICE_HALF(vw, i * WPS, 1u);
      const uint j = kg + KG * i;
      [[unroll]] for (uint r = 0u; r < R; ++r) {
        const float p = pb[r * SB + j];
        l[r] += p;
        alo[r] = fma(vec4(p), vlo, alo[r]);
        ahi[r] = fma(vec4(p), vhi, ahi[r]);
      }
    }
    [[unroll]] for (uint i = 0u; i < KPT * WPS; ++i) {
      kw[i] = kn[i];
      vw[i] = vn[i];
    }
    cur ^= 1u;
  }
#undef LOAD_TILE
#undef LOAD_PAGES
  // The loop's last reads of `work` (the last tile's scores) came before two of its barriers:
  // the sums may overwrite it now.
  [[unroll]] for (uint r = 0u; r < R; ++r) {
    const uint o = (kg * R + r) * (DMAX + 1u) + d;
    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
      work[o + i] = alo[r][i];
      work[o + 4u + i] = ahi[r][i];
    }
    if (c == 0u) work[o - d + DMAX] = l[r];
  }
  barrier();
  for (uint e = tid; e < R * (DMAX + 1u); e += T) {
    const uint r = e / (DMAX + 1u), dd = e % (DMAX + 1u);
    if (int(r / G) >= nq || (dd >= D && dd < DMAX)) continue;
    float x = 0.0;
    for (uint gg = 0u; gg < KG; ++gg) x += work[(gg * R + r) * (DMAX + 1u) + dd];
    const uint at = row_at(t0, r, G, g) * pc.splits + split;
    if (dd < D) {
      part_acc[at * D + dd] = x;
    } else {
      part_ml[2u * at] = m_sh[cur * R + r];
      part_ml[2u * at + 1u] = x;
    }
  }
}

#elif PASS == DA_COOP

// Pass 1 on cooperative matrices (16x16x16 f16 x f16 -> f32; f16 caches, head_dim 32, 64 or 128,
// at most 16 query rows), the design of decode_attention.cu: the workgroup's R query rows are
// the 16 rows of every A fragment (rows past R are zeros), so a key is read once for all of
// them, and each subgroup streams keys of its own with no workgroup barrier in the loop. Its
// keys are one split of pc.splits (the host pushes its splits times the subgroups), so it keeps
// its own running max, sum and output and writes them as that split's part; pass 2 merges them
// all (the subgroups taking their workgroup's split in turns, tile by tile, as
// decode_attention.cu's warps do, ran up to 9% slower). A tile is 16 keys from a multiple of 16
// (keys before the split's first masked), so a paged cache's pages hold whole tiles (block_size
// a multiple of 16); a contiguous cache's last tile of a sequence moves back to end at seq_len
// (the keys it repeats masked). The subgroup reads a tile's K and V rows as 16-byte words into
// registers one tile ahead (the loads of tile i + 1 travel while tile i is computed) and stores
// them to its own shared rows, from which the fragments load (loaded from the cache directly,
// K^T column-major, the pass ran 1.75x slower than the scalar one). The softmax stays in
// registers as in flash attention's forward (flash_attention_fwd_coopmat.glsl): the device's
// probe says which invocations and elements hold each row of a fragment (ROW_LANES,
// ROW_FIRST_LO/HI), a row's maximum and sum come from an invocation's elements and subgroup
// shuffles, and P becomes the f16 operand of P V by a conversion (through shared memory with
// subgroup barriers it ran up to 4% slower).
layout(constant_id = 8) const uint SG = 32;  // subgroup size (the host offers the pass with 32)
layout(constant_id = 9) const uint PG = 1;   // 1: paged cache, 0: contiguous
layout(constant_id = 12) const uint ROW_LANES = 4;
layout(constant_id = 13) const uint ROW_FIRST_LO = 0;
layout(constant_id = 14) const uint ROW_FIRST_HI = 0;

const uint NSG = T / SG;
const uint DF = DMAX / 16;     // 16-column steps of a row (head_dim == DMAX)
const uint QS = DMAX + 8;      // halves per staged row
const uint RW = DMAX / 8;      // 16-byte words of a key row
const uint TW = 16 * RW;       // of a tile's keys (and of its values)
const uint UW = TW / SG;       // of them a lane reads
const uint FL = 256 / SG;      // elements of a fragment per invocation

layout(binding = 1) readonly buffer K8 { uvec4 k8[]; };
layout(binding = 2) readonly buffer V8 { uvec4 v8[]; };

shared uvec4 qs[16 * QS / 8];         // the scaled queries, f16
shared uvec4 kvs[NSG * 32 * QS / 8];  // each subgroup's tile: K rows then V rows, f16 [32][QS]

uvec4 kr[UW], vr[UW];
// A tile's key and value words into kr, vr (rows from `first`, rs words apart).
void fetch(uint first, uint rs) {
  [[unroll]] for (uint i = 0u; i < UW; ++i) {
    const uint u = gl_SubgroupInvocationID + i * SG;
    const uint at = first + (u / RW) * rs + u % RW;
    kr[i] = k8[at];
    vr[i] = v8[at];
  }
}
// ... and from there into the subgroup's rows from K0.
void deposit(uint K0) {
  [[unroll]] for (uint i = 0u; i < UW; ++i) {
    const uint u = gl_SubgroupInvocationID + i * SG;
    const uint at = K0 + (u / RW) * (QS / 8u) + u % RW;
    kvs[at] = kr[i];
    kvs[at + 16u * (QS / 8u)] = vr[i];
  }
}

#include "common/fragment_rows.glsl"

void main() {
  const uint lid = gl_LocalInvocationID.x, sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint split = gl_WorkGroupID.x, g = gl_WorkGroupID.y, blk = gl_WorkGroupID.z + pc.group_offset;
  const uint G = R / BQ, D = pc.head_dim;
  int s, t0, nq;
  if (!block_rows(blk, G, s, t0, nq)) return;
  for (uint e = lid; e < 16u * DMAX / 2u; e += T) {
    const uint r = e / (DMAX / 2u), c = 2u * (e % (DMAX / 2u));
    vec2 x = vec2(0.0);
    if (r < R && int(r / G) < nq) {
      const uint at = row_at(t0, r, G, g) * D + c;
      x = vec2(LOAD(q, at, 1u), LOAD(q, at + 1u, 1u)) * pc.qscale;
    }
    const uint h = r * QS + c;
    qs[h / 8u][(h % 8u) / 2u] = packHalf2x16(x);
  }
  // Each element's row and column (16 r + c): a fragment of 0 .. 255 loaded from the
  // subgroup's rows.
  const uint K0 = sg * (32u * QS / 8u);
  for (uint i = lane; i < 64u; i += SG) kvs[K0 + i] = floatBitsToUint(vec4(4u * i, 4u * i + 1u, 4u * i + 2u, 4u * i + 3u));
  barrier();
  uint rc[FL];
  {
    fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> ix;
    coopMatLoadNV(ix, kvs, K0, 4u, false);
    [[unroll]] for (uint e = 0u; e < FL; ++e) rc[e] = uint(ix[e]);
  }
  subgroupBarrier();  // every lane has loaded the indices: the first tile may overwrite them

  const uint sp = split * NSG + sg;
  int c0, c1;
  split_keys(sp, nq, G, 16u, c0, c1);
  // Per element: the keys its row sees within this split. Per element that is its row's first
  // in this invocation: the row's maximum and this invocation's share of its sum.
  int lo[FL], hi[FL];
  float rm[FL], rl[FL];
  [[unroll]] for (uint e = 0u; e < FL; ++e) {
    const uint r = rc[e] / 16u;
    lo[e] = r < R ? max(lo_row[r], c0) : 0;
    hi[e] = r < R ? min(hi_row[r], c1) : 0;
    rm[e] = NEG;
    rl[e] = 0.0;
  }
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> o[DF];
  [[unroll]] for (uint f = 0u; f < DF; ++f) o[f] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);

  const uint rs = PG != 0u ? RW : pc.kv_heads * RW;  // 16-byte words between key rows
  // p(ts): the key of tile ts's first row (ts, or less at a contiguous sequence's end); its row
  // in 16-byte words.
#define TILE_KEY(ts) (PG != 0u ? (ts) : min((ts), int(pc.seq_len) - 16))
#define TILE_ROW(ts) \
  ((PG != 0u ? page_row(key_page(uint(s), (ts)), g, (ts)) : key_row(uint(s), g, TILE_KEY(ts), false)) * RW)
  if ((c0 & ~15) < c1) fetch(TILE_ROW(c0 & ~15), rs);
  for (int ts = c0 & ~15; ts < c1; ts += 16) {
    const int p = TILE_KEY(ts);
    deposit(K0);
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    if (ts + 16 < c1) fetch(TILE_ROW(ts + 16), rs);
    // The scores in two chains of products, so that each waits on half as many; the queries'
    // fragments load from shared memory at every tile (in registers they pushed the pass past
    // the registers that let 8 subgroups share a multiprocessor).
    fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> sc = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
    fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> sd = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
    [[unroll]] for (uint f = 0u; f < DF; ++f) {
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> qf, kf;
      coopMatLoadNV(qf, qs, f * 2u, QS / 8u, false);
      coopMatLoadNV(kf, kvs, K0 + f * 2u, QS / 8u, true);
      if (f % 2u == 0u) sc = coopMatMulAddNV(qf, kf, sc);
      else sd = coopMatMulAddNV(qf, kf, sd);
    }
    const int from = max(p, ts);  // keys before it were the last tile's
    float mx[FL];
    [[unroll]] for (uint e = 0u; e < FL; ++e) mx[e] = NEG;
    [[unroll]] for (uint e = 0u; e < FL; ++e) {
      const int t = p + int(rc[e] % 16u);
      const float u = sc[e] + sd[e];
      const float z = t >= max(lo[e], from) && t < hi[e] ? (pc.cap2 > 0.0 ? pc.cap2 * tanh(u) : u) : NEG;
      sc[e] = z;
      mx[row_first(e)] = max(mx[row_first(e)], z);
    }
    float alpha[FL], sum[FL];
    [[unroll]] for (uint e = 0u; e < FL; ++e)
      if (row_first(e) == e) {
        const float mn = max(rm[e], rows_max(mx[e]));
        alpha[e] = exp2(rm[e] - mn);  // 1 while the row has seen nothing (both NEG)
        rm[e] = mn;
        sum[e] = 0.0;
      }
    [[unroll]] for (uint e = 0u; e < FL; ++e) {
      const float p_ = sc[e] <= NEG * 0.5 ? 0.0 : exp2(sc[e] - rm[row_first(e)]);
      sum[row_first(e)] += p_;
      sc[e] = p_;
    }
    [[unroll]] for (uint e = 0u; e < FL; ++e)
      if (row_first(e) == e) rl[e] = rl[e] * alpha[e] + sum[e];
    fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> pf = fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>(sc);
    [[unroll]] for (uint f = 0u; f < DF; ++f) {
      [[unroll]] for (uint e = 0u; e < FL; ++e) o[f][e] *= alpha[row_first(e)];
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> vf;
      coopMatLoadNV(vf, kvs, K0 + 16u * (QS / 8u) + f * 2u, QS / 8u, false);
      o[f] = coopMatMulAddNV(pf, vf, o[f]);
    }
    // Every lane has loaded the tile's fragments: the next tile may overwrite them.
    subgroupBarrier();
  }
#undef TILE_KEY
#undef TILE_ROW

  // The part: each row's max and sum (its lanes' shares added), its output a fragment at a time
  // through the subgroup's rows (f32).
  [[unroll]] for (uint e = 0u; e < FL; ++e)
    if (row_first(e) == e) {
      const uint r = rc[e] / 16u;
      const float l = rows_sum(rl[e]);
      if (lane % ROW_LANES == 0u && r < R && int(r / G) < nq) {
        const uint at = row_at(t0, r, G, g) * pc.splits + sp;
        part_ml[2u * at] = rm[e];
        part_ml[2u * at + 1u] = l;
      }
    }
  [[unroll]] for (uint f = 0u; f < DF; ++f) {
    subgroupBarrier();  // the last fragment's values are read
    coopMatStoreNV(o[f], kvs, K0, 4u, false);
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    for (uint e = lane; e < 256u; e += SG) {
      const uint r = e / 16u;
      if (r < R && int(r / G) < nq)
        part_acc[(row_at(t0, r, G, g) * pc.splits + sp) * D + f * 16u + e % 16u] = uintBitsToFloat(kvs[K0 + e / 4u][e % 4u]);
    }
  }
}

#elif PASS == DA_REDUCE

// Invocation (d, row = token * heads + head): merge the splits by log-sum-exp.
void main() {
  const uint d = gl_GlobalInvocationID.x;
  const uint row = gl_WorkGroupID.y + pc.group_offset;
  const uint D = pc.head_dim;
  if (d >= D) return;
  const uint owned = flag(F_VARLEN) ? uint(q_loc[pc.num_seqs]) : pc.tokens;
  if (row >= owned * pc.heads) return;
  const uint h = row % pc.heads;
  const uint base = row * pc.splits;
  const float sink = flag(F_SINKS) ? LOAD(sinks, h, pc.sinks_dtype) * LOG2E : NEG;
  float M = sink;
  for (uint c = 0; c < pc.splits; ++c) M = max(M, part_ml[2u * (base + c)]);
  float L = flag(F_SINKS) ? exp2(sink - M) : 0.0, a = 0.0;
  for (uint c = 0; c < pc.splits; ++c) {
    const float w = exp2(part_ml[2u * (base + c)] - M);
    L += part_ml[2u * (base + c) + 1u] * w;
    a += part_acc[(base + c) * D + d] * w;
  }
  // No key seen: a is 0 whatever L holds (a sink alone).
  STORE(out, row * D + d, pc.dtype, L > 0.0 ? a / L : 0.0);
}

#endif
