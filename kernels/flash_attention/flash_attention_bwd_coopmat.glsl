// The body of flash_attention_{dkdv,dq}_coopmat[_sparse].comp: flash_attention's backward passes
// in f16 on tensor cores through GL_NV_cooperative_matrix (16x16x16 f16 x f16 -> f32 fragments),
// FlashAttention-2's two passes without atomics as the scalar backward (flash_attention.glsl):
// the scalar prep pass computes delta = dout . out and the finish pass the fixed-order sums;
// these passes replace its dk/dv and dq passes, with the same masks, bias (and dbias), cap,
// dropout and packed input, and the same sums per element.
//
// Neither pass reduces a row of a fragment: the softmax's statistics come as lse and delta. Each
// element's row and column within its fragment come from a fragment of indices loaded once
// (16 r + c; fragments of one type share one element layout), so the passes run on any layout.
//
// Both passes accumulate their results transposed (head_dim rows by 16 tokens): the probability
// and gradient fragments then go from accumulators to B operands once a block instead of every
// row of k, v, q or dout being converted (NVIDIA's driver moves every B operand through MOVM).
//
// dk/dv (PASS FA_DKDV_CM): a workgroup of NSG subgroups owns BK = 16 NSG keys of one kv head,
// subgroup s keys 16 s .. 16 s + 15, their k and v rows staged once in shared memory. It walks
// the query tiles of BQ rows of every head of the group (tiles whose queries see none of its
// keys only get their dbias zeros); each tile's q and dout rows, lse and delta load into
// registers while the tile before is computed. Per 16 queries of the tile each subgroup computes
// S = q k^T and dP = dout v^T as fragments, turns them into P (with dropout) and dS element by
// element, and adds dv^T += dout^T P and dk^T += q^T dS into f32 fragments that stay in registers.
//
// dq (PASS FA_DQ_CM): a workgroup of NSG subgroups owns BQ = 16 NSG queries of one head; each
// subgroup keeps q^T and dout^T of its 16 queries in registers (staged once, in the room the key
// blocks use afterwards) and walks the key blocks of BK keys: S^T = k q^T and dP^T = v dout^T as
// fragments, dS^T element by element, dq^T += k^T dS^T. k and v of the next block load into
// registers while this one is computed.
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define ELEM16 1
#include "flash_attention.glsl"

// Specialization (constant ids of flash_attention.glsl): DMAX = head_dim (a multiple of 16),
// RX = subgroup size (16, 32 or 64), RY = NSG; dk/dv: BQ the query tile (a multiple of 16),
// BK = 16 NSG; dq: BQ = 16 NSG, BK the key block (a multiple of 16). SPARSE modules take the
// layout's blocks as 9 and 10.
const uint NSG = RY;
const uint SG = RX;
const uint THREADS = SG * NSG;
const uint FL = 256 / SG;   // elements of a 16x16 fragment per invocation
const uint HS = DMAX + 8;   // halves per staged row (16 bytes of padding)
const uint FD = DMAX / 16;  // fragments across head_dim

layout(binding = B_Q) readonly buffer Q8 { uvec4 q8[]; };
layout(binding = B_K) readonly buffer K8 { uvec4 k8[]; };
layout(binding = B_V) readonly buffer V8 { uvec4 v8[]; };
layout(binding = B_DOUT) readonly buffer DO8 { uvec4 dout8[]; };

const uint SRC_Q = 0u, SRC_K = 1u, SRC_V = 2u, SRC_DOUT = 3u;

uvec4 load8(uint src, uint e) {
  if (src == SRC_Q) return q8[e];
  if (src == SRC_K) return k8[e];
  if (src == SRC_V) return v8[e];
  return dout8[e];
}

// Element u (in units of 8 halves) of rows [0, n) = tokens tok0.. of head h (nh heads) of an
// array: its place in a staged [n][HS] block, and the global index to read or ~0u past `valid`
// (zeros).
uint source_index(uint u, int tok0, int valid, uint nh, uint h, out uint dst) {
  const uint per_row = DMAX / 8;
  const uint r = u / per_row, c = u - r * per_row;
  dst = r * (HS / 8) + c;
  return int(r) < valid ? (uint(tok0 + int(r)) * nh + h) * per_row + c : ~0u;
}

// f16 staging in units of 8 halves, and f32 values in units of 4 floats: both passes' layouts
// are below.
#if PASS == FA_DKDV_CM
// k [BK][HS], v [BK][HS], the tile's q [BQ][HS] and dout [BQ][HS].
const uint KR = 0, VR = KR + BK * HS / 8, XQ = VR + BK * HS / 8, XD = XQ + BQ * HS / 8;
shared uvec4 hs[XD + BQ * HS / 8];
// lse (base 2) and delta of the tile's queries, the fragment of indices, per-subgroup scratch.
const uint LS = 0, DL = LS + BQ, IX = DL + BQ, SC = IX + 256;
#else
// q and dout [BQ][HS] each until their fragments are in registers, then k and v [BK][HS].
const uint XQ = 0, XD = BQ * HS / 8, KR = 0, VR = BK * HS / 8;
const uint ROOM = 2 * BQ * HS / 8 > 2 * BK * HS / 8 ? 2 * BQ * HS / 8 : 2 * BK * HS / 8;
shared uvec4 hs[ROOM];
const uint LS = 0, DL = LS + BQ, IX = DL + BQ, SC = IX + 256;
#endif
shared uvec4 fs[(SC + NSG * 256 + 3) / 4];

float fget(uint e) { return uintBitsToFloat(fs[e / 4][e % 4]); }
void fset(uint e, float x) { fs[e / 4][e % 4] = floatBitsToUint(x); }

// Rows [0, n) at hs[base] = tokens tok0.. of `src`; zero from `valid` on.
void stage_rows(uint base, uint n, int tok0, int valid, uint nh, uint h, uint src) {
  for (uint u = gl_LocalInvocationID.x; u < n * (DMAX / 8); u += THREADS) {
    uint dst;
    const uint e = source_index(u, tok0, valid, nh, h, dst);
    hs[base + dst] = e == ~0u ? uvec4(0) : load8(src, e);
  }
}

void sync_subgroup() {
  subgroupMemoryBarrierShared();
  subgroupBarrier();
}

// Each element's row and column in its fragment (16 r + c), from a fragment of indices written
// to fs[IX] before the last workgroup barrier.
uint rc[FL];
void fill_indices() {
  for (uint e = gl_LocalInvocationID.x; e < 256; e += THREADS) fset(IX + e, float(e));
}
void load_indices() {
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> ix;
  coopMatLoadNV(ix, fs, IX / 4, 4, false);
  [[unroll]] for (uint e = 0; e < FL; ++e) rc[e] = uint(ix[e]);
}

// dS from a score x = (q k) * qscale and dP at (query qi, key kj) of head h: P (with dropout,
// into pd) and dS (into du), as the scalar passes compute them; the dbias entry too where
// `dbias` (the dk/dv pass writes it).
void gradient(float x, float dp, float lse2, float dlt, uint h, int qi, int kj, bool plain, bool dbias, out float pd,
              out float du) {
  const float z = plain ? x : logit(x, h, qi, kj);
  const float p = z == NEG || isinf(lse2) ? 0.0 : exp2(z - lse2);
  pd = p;
  if (flag(F_DROPOUT) && p != 0.0) {
    const float kp = keep(h, qi, kj);
    dp *= kp;
    pd *= kp;
  }
  du = p * (dp - dlt);
  if (flag(F_SOFTCAP) && p != 0.0) {
    const float th = z / pc.cap2;
    du *= 1.0 - th * th;
  }
  if (dbias && qi < q_len && kj < k_len) {
    const uint at = ((seq * pc.heads + h) * pc.seq_q + uint(qi)) * pc.seq_k + uint(kj);
    if (flag(F_DBIAS_SCRATCH)) dbscr_f[at] = du;
    else {
      STORE(dbias, at, bias_dtype(), du);
    }
  }
}

// Where the mask allows every key of [j0, j0 + nk) to every query of [i0, i0 + nq) and no logit
// transform applies, the scaled score is the logit as it is.
bool plain_block(int i0, int nq, int j0, int nk) {
  return (pc.flags & (F_BIAS | F_SOFTCAP | F_SEGMENTS)) == 0u && i0 + nq <= q_len && j0 + nk <= k_len &&
         j0 >= key_lo(i0 + nq - 1) && j0 + nk - 1 <= key_hi(i0);
}

#define F16 fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define F32 fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>

// Rows 16 s .. 16 s + 15 of a result of `rows` tokens from token tok0 (nh heads, head h), out of
// the transposed f32 fragments acc (head_dim rows 16 f.., 16 tokens) * scale, through the
// subgroup's scratch.
#define STORE_ROWS(NAME, ARRAY)                                                                         \
  void NAME(F32 acc[FD], float scale, uint s, int tok0, int rows, uint nh, uint h) {                    \
    const uint scratch = SC + s * 256, lane = gl_SubgroupInvocationID;                                 \
    [[unroll]] for (uint f = 0; f < FD; ++f) {                                                         \
      coopMatStoreNV(acc[f], fs, scratch / 4, 4, true);                                                \
      sync_subgroup();                                                                                 \
      for (uint e = lane; e < 256; e += SG) {                                                          \
        const int r = int(s * 16 + e / 16);                                                            \
        if (r < rows) STORE(ARRAY, (uint(tok0 + r) * nh + h) * DMAX + f * 16 + e % 16, DTYPE, fget(scratch + e) * scale); \
      }                                                                                                \
      sync_subgroup();                                                                                 \
    }                                                                                                  \
  }

#if PASS == FA_DKDV_CM
// ---- dk, dv (and dbias) for one block of 16 NSG keys of one kv head ---------------------------

// Where the queries of tile t (head h) see no key of [j0, j0 + n), their dbias entries are zero.
bool tile_sees(int t, int j0, int n) {
  const int i0 = t * int(BQ), rows = min(int(BQ), q_len - i0);
  return key_hi(i0 + rows - 1) >= j0 && key_lo(i0) <= j0 + n - 1;
}
void zero_dbias(uint h, int t, int j0, int n) {
  const int i0 = t * int(BQ), rows = min(int(BQ), q_len - i0);
  for (uint e = gl_LocalInvocationID.x; e < uint(rows * n); e += THREADS) {
    const int r = int(e) / n, c = int(e) - r * n;
    const uint at = ((seq * pc.heads + h) * pc.seq_q + uint(i0 + r)) * pc.seq_k + uint(j0 + c);
    if (flag(F_DBIAS_SCRATCH)) dbscr_f[at] = 0.0;
    else {
      STORE(dbias, at, bias_dtype(), 0.0);
    }
  }
}

// The next query tile any of whose queries sees a key of the block, over the heads of the
// group in turn (h and tiles advance; -1 after the last).
int next_tile(inout uint h, inout Walk tiles, uint h_end, int j0, int n, bool dbias) {
  while (h < h_end) {
    for (int t = walk_next(tiles); t >= 0; t = walk_next(tiles)) {
      if (tile_sees(t, j0, n)) return t;
      if (dbias) zero_dbias(h, t, j0, n);
    }
    if (++h < h_end) tiles = QUERY_TILES(h, j0, 0, q_len > 0 ? (q_len - 1) / int(BQ) : -1, int(BQ));
  }
  return -1;
}

// A query tile's q and dout rows, lse and delta pass through registers: fetch() issues the
// global loads of the next tile before this one's arithmetic, deposit() writes them to shared
// memory after it.
const uint PF = EJK_CEIL_DIV(BQ * DMAX / 8, THREADS), PL = EJK_CEIL_DIV(BQ, THREADS);
uvec4 pq[PF], pd[PF];
float pls[PL], pdl[PL];
void fetch(int t, uint h) {
  const int i0 = t * int(BQ), rows = min(int(BQ), q_len - i0);
  [[unroll]] for (uint x = 0; x < PF; ++x) {
    const uint u = gl_LocalInvocationID.x + x * THREADS;
    uint dst;
    const uint e = u < BQ * (DMAX / 8) ? source_index(u, q_start + i0, rows, pc.heads, h, dst) : ~0u;
    pq[x] = e == ~0u ? uvec4(0) : q8[e];
    pd[x] = e == ~0u ? uvec4(0) : dout8[e];
  }
  [[unroll]] for (uint x = 0; x < PL; ++x) {
    const int r = int(gl_LocalInvocationID.x + x * THREADS);
    const bool inr = r < rows;
    pls[x] = inr ? lse_f[lse_index(h, i0 + r)] * LOG2E : 0.0;
    pdl[x] = inr ? delta_f[h * pc.total_q + uint(q_start + i0 + r)] : 0.0;
  }
}
void deposit() {
  [[unroll]] for (uint x = 0; x < PF; ++x) {
    const uint u = gl_LocalInvocationID.x + x * THREADS;
    if (u < BQ * (DMAX / 8)) {
      const uint r = u / (DMAX / 8), c = u - r * (DMAX / 8);
      hs[XQ + r * (HS / 8) + c] = pq[x];
      hs[XD + r * (HS / 8) + c] = pd[x];
    }
  }
  [[unroll]] for (uint x = 0; x < PL; ++x) {
    const uint r = gl_LocalInvocationID.x + x * THREADS;
    if (r < BQ) {
      fset(LS + r, pls[x]);
      fset(DL + r, pdl[x]);
    }
  }
}

F32 dkt[FD], dvt[FD];
STORE_ROWS(store_dk, dk)
STORE_ROWS(store_dv, dv)

void main() {
  const uint kb = gl_WorkGroupID.x + pc.group_x;
  const uint hk = gl_WorkGroupID.y + pc.group_y;
  seq = gl_WorkGroupID.z + pc.group_z;
  sequence_bounds(seq);
  const int j0 = int(kb * BK);
  if (j0 >= k_len) return;
  const int n = min(int(BK), k_len - j0);
  const uint s = gl_SubgroupID;
  const int key0 = j0 + int(s * 16);  // this subgroup's first key
  [[unroll]] for (uint f = 0; f < FD; ++f) {
    dkt[f] = F32(0.0);
    dvt[f] = F32(0.0);
  }
  stage_rows(KR, BK, k_start + j0, n, pc.kv_heads, hk, SRC_K);
  stage_rows(VR, BK, k_start + j0, n, pc.kv_heads, hk, SRC_V);
  fill_indices();
  barrier();
  load_indices();
  const bool dbias = flag(F_BIAS);

  const uint h_end = (hk + 1u) * pc.group;
  uint hn = hk * pc.group;
  Walk tiles = QUERY_TILES(hn, j0, 0, q_len > 0 ? (q_len - 1) / int(BQ) : -1, int(BQ));
  int t = next_tile(hn, tiles, h_end, j0, n, dbias);
  uint h = hn;
  if (t >= 0) fetch(t, h);
  while (t >= 0) {
    const int tn = next_tile(hn, tiles, h_end, j0, n, dbias);
    barrier();  // every subgroup is done with the last tile
    deposit();
    barrier();
    if (tn >= 0) fetch(tn, hn);
    const int i0 = t * int(BQ);
    const bool plain = plain_block(i0, int(BQ), key0, 16);
    [[unroll]] for (uint jq = 0; jq < BQ / 16; ++jq) {
      // S = q k^T and dP = dout v^T: 16 queries x the subgroup's 16 keys; k^T and v^T read as
      // column-major views of their rows. (Kept in registers instead, k^T and v^T spilled on
      // the H200 and ran 12% slower: the driver converts a B operand at every use.)
      F32 sc = F32(0.0), dp = F32(0.0);
      [[unroll]] for (uint f = 0; f < FD; ++f) {
        F16 a, b;
        coopMatLoadNV(a, hs, XQ + (jq * 16 * HS + f * 16) / 8, HS / 8, false);
        coopMatLoadNV(b, hs, KR + (s * 16 * HS + f * 16) / 8, HS / 8, true);
        sc = coopMatMulAddNV(a, b, sc);
        coopMatLoadNV(a, hs, XD + (jq * 16 * HS + f * 16) / 8, HS / 8, false);
        coopMatLoadNV(b, hs, VR + (s * 16 * HS + f * 16) / 8, HS / 8, true);
        dp = coopMatMulAddNV(a, b, dp);
      }
      [[unroll]] for (uint e = 0; e < FL; ++e) {
        const uint r = jq * 16 + rc[e] / 16, c = rc[e] % 16;  // query of the tile, key of the subgroup
        float pe, du;
        gradient(sc[e] * pc.qscale, dp[e], fget(LS + r), fget(DL + r), h, i0 + int(r), key0 + int(c), plain, dbias, pe,
                 du);
        sc[e] = pe;
        dp[e] = du;
      }
      // dv^T += dout^T P, dk^T += q^T dS (q unscaled: softmax_scale at the store): P and dS go
      // from the accumulators to B operands; dout^T and q^T are column-major views of the rows.
      const F16 pb = F16(sc);
      const F16 ub = F16(dp);
      [[unroll]] for (uint f = 0; f < FD; ++f) {
        F16 a;
        coopMatLoadNV(a, hs, XD + (jq * 16 * HS + f * 16) / 8, HS / 8, true);
        dvt[f] = coopMatMulAddNV(a, pb, dvt[f]);
        coopMatLoadNV(a, hs, XQ + (jq * 16 * HS + f * 16) / 8, HS / 8, true);
        dkt[f] = coopMatMulAddNV(a, ub, dkt[f]);
      }
    }
    t = tn;
    h = hn;
  }

  store_dk(dkt, pc.softmax_scale, s, k_start + j0, n, pc.kv_heads, hk);
  store_dv(dvt, 1.0, s, k_start + j0, n, pc.kv_heads, hk);
}

#else
// ---- dq for one block of 16 NSG queries of one head --------------------------------------------

// A key block of k or v passes through registers: fetch() issues the global loads of the next
// block before this one's arithmetic, deposit() writes them to shared memory after it.
const uint PF = EJK_CEIL_DIV(BK * DMAX / 8, THREADS);
uvec4 pk[PF], pv[PF];
void fetch(int tok0, int valid, uint nh, uint h) {
  [[unroll]] for (uint t = 0; t < PF; ++t) {
    const uint u = gl_LocalInvocationID.x + t * THREADS;
    uint dst;
    const uint e = u < BK * (DMAX / 8) ? source_index(u, tok0, valid, nh, h, dst) : ~0u;
    pk[t] = e == ~0u ? uvec4(0) : k8[e];
    pv[t] = e == ~0u ? uvec4(0) : v8[e];
  }
}
void deposit() {
  [[unroll]] for (uint t = 0; t < PF; ++t) {
    const uint u = gl_LocalInvocationID.x + t * THREADS;
    if (u < BK * (DMAX / 8)) {
      const uint r = u / (DMAX / 8), c = u - r * (DMAX / 8);
      hs[KR + r * (HS / 8) + c] = pk[t];
      hs[VR + r * (HS / 8) + c] = pv[t];
    }
  }
}

F32 dqt[FD];
F16 qt[FD], dt[FD];
STORE_ROWS(store_dq, dq)

void main() {
  const uint qb = gl_WorkGroupID.x + pc.group_x;
  head = gl_WorkGroupID.y + pc.group_y;
  seq = gl_WorkGroupID.z + pc.group_z;
  sequence_bounds(seq);
  const int i0 = int(qb * BQ);
  if (i0 >= q_len) return;
  const int rows = min(int(BQ), q_len - i0);
  const uint hk = head / pc.group;
  const uint s = gl_SubgroupID;
  const int row0 = i0 + int(s * 16);  // this subgroup's first query

  [[unroll]] for (uint f = 0; f < FD; ++f) dqt[f] = F32(0.0);
  stage_rows(XQ, BQ, q_start + i0, rows, pc.heads, head, SRC_Q);
  stage_rows(XD, BQ, q_start + i0, rows, pc.heads, head, SRC_DOUT);
  for (uint r = gl_LocalInvocationID.x; r < BQ; r += THREADS) {
    const bool inr = int(r) < rows;
    fset(LS + r, inr ? lse_f[lse_index(head, i0 + int(r))] * LOG2E : 0.0);
    fset(DL + r, inr ? delta_f[head * pc.total_q + uint(q_start + i0 + int(r))] : 0.0);
  }
  fill_indices();
  barrier();
  // q^T and dout^T of the subgroup's queries (head_dim x 16 queries), the B operands of
  // S^T = k q^T and dP^T = v dout^T, stay in registers.
  [[unroll]] for (uint f = 0; f < FD; ++f) {
    coopMatLoadNV(qt[f], hs, XQ + (s * 16 * HS + f * 16) / 8, HS / 8, true);
    coopMatLoadNV(dt[f], hs, XD + (s * 16 * HS + f * 16) / 8, HS / 8, true);
  }
  load_indices();
  float lse2[FL], dlt[FL];
  [[unroll]] for (uint e = 0; e < FL; ++e) {
    lse2[e] = fget(LS + s * 16 + rc[e] % 16);
    dlt[e] = fget(DL + s * 16 + rc[e] % 16);
  }
  barrier();  // q's and dout's room takes k and v from here on

  const int jlo = max(0, key_lo(i0)), jhi = min(k_len - 1, key_hi(i0 + rows - 1));
  Walk tiles = KEY_TILES(head, i0, jlo / int(BK), jlo <= jhi ? jhi / int(BK) : -1, int(BK));
  int kb = walk_next(tiles), next = -1;
  if (kb >= 0) fetch(k_start + kb * int(BK), min(int(BK), k_len - kb * int(BK)), pc.kv_heads, hk);
  for (; kb >= 0; kb = next) {
    const int j0 = kb * int(BK);
    next = walk_next(tiles);
    barrier();
    deposit();
    barrier();
    if (next >= 0) fetch(k_start + next * int(BK), min(int(BK), k_len - next * int(BK)), pc.kv_heads, hk);
    const bool plain = plain_block(row0, 16, j0, int(BK));
    [[unroll]] for (uint jb = 0; jb < BK / 16; ++jb) {
      // S^T = k q^T and dP^T = v dout^T: 16 keys x the subgroup's 16 queries.
      F32 st = F32(0.0), dpt = F32(0.0);
      [[unroll]] for (uint f = 0; f < FD; ++f) {
        F16 a;
        coopMatLoadNV(a, hs, KR + (jb * 16 * HS + f * 16) / 8, HS / 8, false);
        st = coopMatMulAddNV(a, qt[f], st);
        coopMatLoadNV(a, hs, VR + (jb * 16 * HS + f * 16) / 8, HS / 8, false);
        dpt = coopMatMulAddNV(a, dt[f], dpt);
      }
      [[unroll]] for (uint e = 0; e < FL; ++e) {
        float pe, du;
        gradient(st[e] * pc.qscale, dpt[e], lse2[e], dlt[e], head, row0 + int(rc[e] % 16),
                 j0 + int(jb * 16 + rc[e] / 16), plain, false, pe, du);
        st[e] = du;
      }
      // dq^T += k^T dS^T (k unscaled: softmax_scale at the store): dS^T goes from the
      // accumulator to a B operand; k^T is a column-major view of the rows.
      const F16 ub = F16(st);
      [[unroll]] for (uint f = 0; f < FD; ++f) {
        F16 a;
        coopMatLoadNV(a, hs, KR + (jb * 16 * HS + f * 16) / 8, HS / 8, true);
        dqt[f] = coopMatMulAddNV(a, ub, dqt[f]);
      }
    }
  }

  store_dq(dqt, pc.softmax_scale, s, q_start + i0, rows, pc.heads, head);
}
#endif
