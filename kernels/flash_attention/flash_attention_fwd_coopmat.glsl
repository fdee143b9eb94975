// The body of flash_attention_fwd_coopmat.comp and its SPARSE twin: flash_attention forward in
// f16 on tensor cores through GL_NV_cooperative_matrix (16x16x16 f16 x f16 -> f32 fragments); masks,
// bias, cap, sinks, dropout and packed input as in flash_attention.glsl, whose bindings, push
// constants and helpers it shares.
//
// A workgroup of NSG subgroups owns BQ = 16 NSG query rows of one (sequence, head); subgroup s
// owns rows 16 s .. 16 s + 15; its q fragments stay in registers. Each key block's k and v are
// staged as f16 in shared memory with 16 bytes of padding per row, the next block's rows already
// on their way into registers while this one is computed. Per key block each subgroup computes
// its 16 x BK scores as fragments (q k^T), runs the online softmax on them, rescales its output
// fragments by the row factors and adds P v. The output stays in f32 fragments until the end.
// With STAGES 2 there are two buffers of k and v: the next block's k is deposited into the other
// one after this block's scores and its v after P v, so a block costs one workgroup barrier
// instead of two.
//
// The softmax, two ways. Where the host's probe found each row of a fragment on ROW_LANES
// invocations at the same elements of each (kernels/common/vulkan_fragment_rows.hpp; NVIDIA's
// layout spreads a row over 4), the scores never leave registers: an element's row and column
// come from a fragment of indices loaded once, a row's maximum and sum from the invocation's
// elements on that row and ROW_LANES - 1 subgroup shuffles, and P becomes the f16 operand of P v
// by a conversion. The state of a row (its maximum, this invocation's share of its sum) lives at
// the row's first element of the invocation (ROW_FIRST). Elsewhere (ROW_LANES 0) each subgroup
// stores its scores to an f32 scratch, runs the softmax there in scalar code (SG / 16 lanes per
// row, each on pairs of columns), writes P as f16 to shared memory and rescales its output
// fragments by the row factors against a fragment loaded from a [16][16] matrix of them:
// fragments of one type share one element layout.
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_vote : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define PASS FA_FWD_CM
#define ELEM16 1
#include "flash_attention.glsl"

// Specialization (constant ids of flash_attention.glsl): BQ = 16 NSG, BK a multiple of 16,
// DMAX = head_dim (a multiple of 16), RX = subgroup size (16, 32 or 64), RY = NSG; and its own
// STAGES, the buffers of k and v (1 or 2). SPARSE modules take the layout's blocks as 9 and 10.
// ROW_LANES and ROW_FIRST_LO/HI are the probe's FragmentRows (lanes, first_lo, first_hi).
layout(constant_id = 8) const uint STAGES = 1;
layout(constant_id = 11) const uint ROW_LANES = 0;
layout(constant_id = 12) const uint ROW_FIRST_LO = 0;
layout(constant_id = 13) const uint ROW_FIRST_HI = 0;
const uint SHARED_SOFTMAX = 1u / (ROW_LANES + 1u);  // 1 with ROW_LANES 0, else 0
const uint NSG = RY;
const uint SG = RX;
const uint THREADS = SG * NSG;
const uint FL = 256 / SG;      // elements of a 16x16 fragment per invocation
const uint LPR = SG / 16;      // lanes per score row
const uint PAIRS = BK / (2 * LPR);  // column pairs per lane
const uint HS = DMAX + 8;      // halves per staged row
const uint PS = BK + 8;        // halves per P row
const uint FD = DMAX / 16;     // output fragments per subgroup
const uint FK = BK / 16;       // key fragments per block

// f16 staging, in units of 8 halves: q [BQ][HS] until its fragments are in registers, then in the
// same room STAGES buffers of k and v [BK][HS] each; after it, with the shared softmax, P
// [NSG * 16][PS].
const uint KVB = BK * HS / 8;  // one of k or v
const uint QB = 0, KB = 0;
const uint PB = BQ * HS / 8 > STAGES * 2 * KVB ? BQ * HS / 8 : STAGES * 2 * KVB;
shared uvec4 hs[PB + SHARED_SOFTMAX * NSG * 16 * PS / 8];
// f32, in units of 4 floats: per-subgroup scratch (SCR floats: the shared softmax's [16][BK]
// scores, then output fragments [16][16]); with the shared softmax per-row partials
// [NSG * 16][LPR] and per-row factors [NSG * 16] at AB, else the fragment of indices [16][16].
const uint SCR = SHARED_SOFTMAX * 16 * BK + (1u - SHARED_SOFTMAX) * 256;
const uint SB = 0, RB = SB + NSG * SCR, AB = RB + SHARED_SOFTMAX * NSG * 16 * LPR;
shared uvec4 fs[(AB + SHARED_SOFTMAX * NSG * 16 + (1u - SHARED_SOFTMAX) * 256 + 3) / 4];

float fget(uint e) { return uintBitsToFloat(fs[e / 4][e % 4]); }
void fset(uint e, float x) { fs[e / 4][e % 4] = floatBitsToUint(x); }

layout(binding = B_Q) readonly buffer Q8 { uvec4 q8[]; };
layout(binding = B_K) readonly buffer K8 { uvec4 k8[]; };
layout(binding = B_V) readonly buffer V8 { uvec4 v8[]; };

// Element u (in units of 8 halves) of rows [0, n) = tokens tok0.. of head h (nh heads) of q, k or
// v: its row, column and the global index to read, or ~0u past `valid` (zeros).
uint source_index(uint u, int tok0, int valid, uint nh, uint h, out uint dst) {
  const uint per_row = DMAX / 8;
  const uint r = u / per_row, c = u - r * per_row;
  dst = r * (HS / 8) + c;
  return int(r) < valid ? (uint(tok0 + int(r)) * nh + h) * per_row + c : ~0u;
}

// Rows [0, n) at hs[base] = tokens tok0.. of q; zero from `valid` on.
void stage_q(uint base, uint n, int tok0, int valid, uint nh, uint h) {
  for (uint u = gl_LocalInvocationID.x; u < n * (DMAX / 8); u += THREADS) {
    uint dst;
    const uint e = source_index(u, tok0, valid, nh, h, dst);
    hs[base + dst] = e == ~0u ? uvec4(0) : q8[e];
  }
}

// A key block of k or v passes through registers: fetch() issues the global loads of a block
// before arithmetic, deposit() writes them to shared memory after it. With two stages k and v
// travel one after the other (the next k under this block's scores and softmax, the next v under
// its P v), so only one of them holds registers at a time.
const uint PF = EJK_CEIL_DIV(BK * DMAX / 8, THREADS);
uvec4 pk[PF], pv[PF];
#define FETCH(NAME, REGS, SRC)                                                                  \
  void NAME(int tok0, int valid, uint nh, uint h) {                                             \
    [[unroll]] for (uint t = 0; t < PF; ++t) {                                                  \
      const uint u = gl_LocalInvocationID.x + t * THREADS;                                      \
      uint dst;                                                                                 \
      const uint e = u < BK * (DMAX / 8) ? source_index(u, tok0, valid, nh, h, dst) : ~0u;      \
      REGS[t] = e == ~0u ? uvec4(0) : SRC[e];                                                   \
    }                                                                                           \
  }
#define DEPOSIT(NAME, REGS, OFFSET)                                                             \
  void NAME(uint buf) {                                                                         \
    const uint d = KB + buf * 2 * KVB + OFFSET;                                                 \
    [[unroll]] for (uint t = 0; t < PF; ++t) {                                                  \
      const uint u = gl_LocalInvocationID.x + t * THREADS;                                      \
      if (u < BK * (DMAX / 8)) {                                                                \
        const uint r = u / (DMAX / 8), c = u - r * (DMAX / 8);                                  \
        hs[d + r * (HS / 8) + c] = REGS[t];                                                     \
      }                                                                                         \
    }                                                                                           \
  }
FETCH(fetch_k, pk, k8)
FETCH(fetch_v, pv, v8)
DEPOSIT(deposit_k, pk, 0)
DEPOSIT(deposit_v, pv, KVB)

void sync_subgroup() {
  subgroupMemoryBarrierShared();
  subgroupBarrier();
}

// Where the mask allows every key of the block to every row of the workgroup and no logit
// transform applies (long unmasked sequences, the interior of a causal one), the scaled score is
// the logit as it is.
bool plain_block(int i0, int j0) {
  return (pc.flags & (F_BIAS | F_SOFTCAP | F_SEGMENTS)) == 0u && i0 + int(BQ) <= q_len && j0 + int(BK) <= k_len &&
         j0 >= key_lo(i0 + int(BQ) - 1) && j0 + int(BK) - 1 <= key_hi(i0);
}

fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> o[FD];
fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> qf[FD];

// o[f] *= the factor of its row, for the factors at fs[AB + 16 s ..]: a [16][16] fragment of them
// (built in the subgroup's scratch, whose scores are consumed) matches o's element layout.
void scale_rows(uint s, uint lane, uint scratch) {
  for (uint e = lane; e < 256; e += SG) fset(scratch + e, fget(AB + s * 16 + e / 16));
  sync_subgroup();
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> f;
  coopMatLoadNV(f, fs, scratch / 4, 4, false);
  [[unroll]] for (uint x = 0; x < FD; ++x)
    for (int i = 0; i < o[x].length(); ++i) o[x][i] *= f[i];
  sync_subgroup();
}

// The shared softmax's state of this invocation's row: its maximum and this lane's share of its sum.
float m, l;

// Scores and softmax of one key block of the subgroup's rows through shared memory: scores to the
// scratch, P to shared memory as f16.
void softmax_shared(uint s, uint lane, uint scratch, uint kbuf, int i0, int j0, int qi, uint rr, uint part, uint row) {
  // Scores of this subgroup's rows: q k^T, k^T read as a column-major view of k's rows.
  [[unroll]] for (uint jb = 0; jb < FK; ++jb) {
    fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
    [[unroll]] for (uint f = 0; f < FD; ++f) {
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> b;
      coopMatLoadNV(b, hs, kbuf + (jb * 16 * HS + f * 16) / 8, HS / 8, true);
      acc = coopMatMulAddNV(qf[f], b, acc);
    }
    coopMatStoreNV(acc, fs, (scratch + jb * 16) / 4, BK / 4, false);
  }
  sync_subgroup();

  // Online softmax on the scratch: this lane's column pairs c = 2 (part + t LPR) + {0, 1}.
  const bool plain = plain_block(i0, j0);
  float z[2 * PAIRS];
  float mx = NEG;
  [[unroll]] for (uint t = 0; t < PAIRS; ++t)
    [[unroll]] for (uint e = 0; e < 2; ++e) {
      const uint c = 2 * (part + t * LPR) + e;
      const float x = fget(scratch + rr * BK + c) * pc.qscale;
      z[2 * t + e] = plain ? x : logit(x, head, qi, j0 + int(c));
      mx = max(mx, z[2 * t + e]);
    }
  fset(RB + row * LPR + part, mx);
  sync_subgroup();
  for (uint x = 0; x < LPR; ++x) mx = max(mx, fget(RB + row * LPR + x));
  mx = max(mx, m);
  float alpha = 1.0;
  if (mx != NEG) {
    alpha = exp2(m - mx);
    m = mx;
  }
  float sum = 0.0;
  [[unroll]] for (uint t = 0; t < PAIRS; ++t) {
    float p[2];
    [[unroll]] for (uint e = 0; e < 2; ++e) {
      const uint c = 2 * (part + t * LPR) + e;
      p[e] = mx == NEG ? 0.0 : exp2(z[2 * t + e] - mx);
      sum += p[e];
      if (flag(F_DROPOUT) && p[e] != 0.0) p[e] *= keep(head, qi, j0 + int(c));
    }
    const uint h = row * PS + 2 * (part + t * LPR);  // half index within P
    hs[PB + h / 8][(h % 8) / 2] = packHalf2x16(vec2(p[0], p[1]));
  }
  l = l * alpha + sum;
  if (part == 0u) fset(AB + row, alpha);
  sync_subgroup();

  // o *= alpha per row.
  if (subgroupAny(alpha != 1.0)) scale_rows(s, lane, scratch);

}

// o += P v, P from shared memory.
void pv_shared(uint s, uint vbuf) {
  [[unroll]] for (uint kk = 0; kk < BK; kk += 16) {
    fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a;
    coopMatLoadNV(a, hs, PB + (s * 16 * PS + kk) / 8, PS / 8, false);
    [[unroll]] for (uint f = 0; f < FD; ++f) {
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> b;
      coopMatLoadNV(b, hs, vbuf + (kk * HS + f * 16) / 8, HS / 8, false);
      o[f] = coopMatMulAddNV(a, b, o[f]);
    }
  }
}

// The register softmax's state. Per element of a fragment: its row and column (16 r + c). Per
// element that is its row's first in this invocation: the row's maximum and this invocation's
// share of the row's sum.
uint rc[FL];
float rm[FL], rl[FL];

#include "common/fragment_rows.glsl"

// Scores and softmax of one key block of the subgroup's rows in registers; P left in pf.
fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> pf[FK];
void softmax_registers(uint s, uint kbuf, int i0, int j0) {
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> sc[FK];
  [[unroll]] for (uint jb = 0; jb < FK; ++jb) {
    sc[jb] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
    [[unroll]] for (uint f = 0; f < FD; ++f) {
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> b;
      coopMatLoadNV(b, hs, kbuf + (jb * 16 * HS + f * 16) / 8, HS / 8, true);
      sc[jb] = coopMatMulAddNV(qf[f], b, sc[jb]);
    }
  }
  const bool plain = plain_block(i0, j0);
  const int qrow = i0 + int(s * 16);
  float mx[FL];
  [[unroll]] for (uint e = 0; e < FL; ++e) mx[e] = NEG;
  [[unroll]] for (uint jb = 0; jb < FK; ++jb)
    [[unroll]] for (uint e = 0; e < FL; ++e) {
      float x = sc[jb][e] * pc.qscale;
      if (!plain) x = logit(x, head, qrow + int(rc[e] / 16), j0 + int(jb * 16 + rc[e] % 16));
      sc[jb][e] = x;
      mx[row_first(e)] = max(mx[row_first(e)], x);
    }
  float alpha[FL], sum[FL];
  [[unroll]] for (uint e = 0; e < FL; ++e)
    if (row_first(e) == e) {
      const float mn = max(rm[e], rows_max(mx[e]));
      alpha[e] = mn == NEG ? 1.0 : exp2(rm[e] - mn);
      rm[e] = mn;
      sum[e] = 0.0;  // the block's share of the row sum
    }
  [[unroll]] for (uint jb = 0; jb < FK; ++jb)
    [[unroll]] for (uint e = 0; e < FL; ++e) {
      const float mr = rm[row_first(e)];
      float p = mr == NEG ? 0.0 : exp2(sc[jb][e] - mr);
      sum[row_first(e)] += p;
      if (flag(F_DROPOUT) && p != 0.0) p *= keep(head, qrow + int(rc[e] / 16), j0 + int(jb * 16 + rc[e] % 16));
      sc[jb][e] = p;
    }
  [[unroll]] for (uint e = 0; e < FL; ++e)
    if (row_first(e) == e) rl[e] = rl[e] * alpha[e] + sum[e];
  [[unroll]] for (uint f = 0; f < FD; ++f)
    [[unroll]] for (uint e = 0; e < FL; ++e) o[f][e] *= alpha[row_first(e)];

  [[unroll]] for (uint jb = 0; jb < FK; ++jb) pf[jb] = fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>(sc[jb]);
}

// o += P v, P from registers.
void pv_registers(uint vbuf) {
  [[unroll]] for (uint jb = 0; jb < FK; ++jb)
    [[unroll]] for (uint f = 0; f < FD; ++f) {
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> b;
      coopMatLoadNV(b, hs, vbuf + (jb * 16 * HS + f * 16) / 8, HS / 8, false);
      o[f] = coopMatMulAddNV(pf[jb], b, o[f]);
    }
}

void main() {
  const uint qb = gl_WorkGroupID.x + pc.group_x;
  head = gl_WorkGroupID.y + pc.group_y;
  seq = gl_WorkGroupID.z + pc.group_z;
  sequence_bounds(seq);
  const int i0 = int(qb * BQ);
  if (i0 >= q_len) return;
  const int rows = min(int(BQ), q_len - i0);
  const uint hk = head / pc.group;
  const uint s = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint rr = lane / LPR, part = lane % LPR;  // this lane's row of the subgroup's 16, and share
  const uint row = s * 16 + rr;                   // within the block
  const int qi = i0 + int(row);
  const uint scratch = SB + s * SCR;

  [[unroll]] for (uint f = 0; f < FD; ++f) o[f] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
  const float sink = flag(F_SINKS) ? LOAD(sinks, head, sinks_dtype()) * LOG2E : NEG;
  m = sink;
  l = flag(F_SINKS) && part == 0u ? 1.0 : 0.0;
  if (SHARED_SOFTMAX == 0u)
    [[unroll]] for (uint e = 0; e < FL; ++e) {
      rm[e] = sink;
      rl[e] = flag(F_SINKS) && lane % ROW_LANES == 0u ? 1.0 : 0.0;
    }
  stage_q(QB, BQ, q_start + i0, rows, pc.heads, head);
  if (SHARED_SOFTMAX == 0u)
    for (uint e = gl_LocalInvocationID.x; e < 256; e += THREADS) fset(AB + e, float(e));
  barrier();
  [[unroll]] for (uint f = 0; f < FD; ++f) coopMatLoadNV(qf[f], hs, QB + (s * 16 * HS + f * 16) / 8, HS / 8, false);
  if (SHARED_SOFTMAX == 0u) {
    fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> ix;
    coopMatLoadNV(ix, fs, AB / 4, 4, false);
    [[unroll]] for (uint e = 0; e < FL; ++e) rc[e] = uint(ix[e]);
  }
  barrier();  // q's room takes k and v from here on

  const int jlo = max(0, key_lo(i0)), jhi = min(k_len - 1, key_hi(i0 + rows - 1));
  Walk tiles = KEY_TILES(head, i0, jlo / int(BK), jlo <= jhi ? jhi / int(BK) : -1, int(BK));
  // The next block is known one step ahead: its keys travel while this one is computed.
  int kb = walk_next(tiles), next = -1;
  if (kb >= 0) {
    const int tok0 = k_start + kb * int(BK), valid = min(int(BK), k_len - kb * int(BK));
    fetch_k(tok0, valid, pc.kv_heads, hk);
    fetch_v(tok0, valid, pc.kv_heads, hk);
    if (STAGES == 2) {
      deposit_k(0);
      deposit_v(0);
    }
  }
  for (uint step = 0; kb >= 0; ++step, kb = next) {
    const int j0 = kb * int(BK);
    uint buf = STAGES == 2 ? step & 1u : 0u;
    next = walk_next(tiles);
    const int tok0 = k_start + next * int(BK), valid = min(int(BK), k_len - next * int(BK));
    uint kbuf = KB + buf * 2 * KVB, vbuf = kbuf + KVB;
    // Two stages: every invocation is done with the other buffers (read in the last block) and
    // this block's are deposited; the next k is deposited after the scores, the next v after P v.
    // One stage: the same for the one buffer, with a deposit between.
    barrier();
    if (STAGES == 1) {
      deposit_k(0);
      deposit_v(0);
      barrier();
      if (next >= 0) {
        fetch_k(tok0, valid, pc.kv_heads, hk);
        fetch_v(tok0, valid, pc.kv_heads, hk);
      }
    } else if (next >= 0) {
      fetch_k(tok0, valid, pc.kv_heads, hk);
    }
    if (SHARED_SOFTMAX == 1u)
      softmax_shared(s, lane, scratch, kbuf, i0, j0, qi, rr, part, row);
    else
      softmax_registers(s, kbuf, i0, j0);
    if (STAGES == 2 && next >= 0) {
      deposit_k(buf ^ 1u);
      fetch_v(tok0, valid, pc.kv_heads, hk);
    }
    if (SHARED_SOFTMAX == 1u)
      pv_shared(s, vbuf);
    else
      pv_registers(vbuf);
    if (STAGES == 2 && next >= 0) deposit_v(buf ^ 1u);
  }

  // out = o / l, with l the row sums from the lanes' shares.
  if (SHARED_SOFTMAX == 1u) {
    sync_subgroup();
    fset(RB + row * LPR + part, l);
    sync_subgroup();
    float total = 0.0;
    for (uint x = 0; x < LPR; ++x) total += fget(RB + row * LPR + x);
    if (part == 0u) {
      fset(AB + row, total > 0.0 ? 1.0 / total : 0.0);
      if (qi < q_len) lse_f[lse_index(head, qi)] = total > 0.0 ? (m + log2(total)) * LN2 : uintBitsToFloat(0xff800000u);
    }
    sync_subgroup();
    scale_rows(s, lane, scratch);
  } else {
    float inv[FL];
    [[unroll]] for (uint e = 0; e < FL; ++e)
      if (row_first(e) == e) {
        const float total = rows_sum(rl[e]);
        inv[e] = total > 0.0 ? 1.0 / total : 0.0;
        const int i = i0 + int(s * 16 + rc[e] / 16);
        if (lane % ROW_LANES == 0u && i < q_len)
          lse_f[lse_index(head, i)] = total > 0.0 ? (rm[e] + log2(total)) * LN2 : uintBitsToFloat(0xff800000u);
      }
    [[unroll]] for (uint f = 0; f < FD; ++f)
      [[unroll]] for (uint e = 0; e < FL; ++e) o[f][e] *= inv[row_first(e)];
  }
  [[unroll]] for (uint f = 0; f < FD; ++f) {
    coopMatStoreNV(o[f], fs, scratch / 4, 4, false);
    sync_subgroup();
    for (uint e = lane; e < 256; e += SG) {
      const uint r = e / 16, c = e % 16;
      const int i = i0 + int(s * 16 + r);
      if (i < q_len) STORE(out, (uint(q_start + i) * pc.heads + head) * DMAX + f * 16 + c, DTYPE, fget(scratch + e));
    }
    sync_subgroup();
  }
}
