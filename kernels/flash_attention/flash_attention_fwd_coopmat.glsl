// The body of flash_attention_fwd_coopmat.comp and its SPARSE twin: flash_attention forward in
// f16 on tensor cores through GL_NV_cooperative_matrix (16x16x16 f16 x f16 -> f32 fragments); masks, bias, cap, sinks, dropout and packed input as in
// flash_attention.glsl, whose bindings, push constants and helpers it shares.
//
// A workgroup of NSG subgroups owns BQ = 16 NSG query rows of one (sequence, head); subgroup s
// owns rows 16 s .. 16 s + 15; its q fragments stay in registers. Each key block's k and v are
// staged as f16 in shared memory with 16 bytes of padding per row, the next block's rows already
// on their way into registers while this one is computed. Per key block each subgroup computes
// its 16 x BK scores as fragments (q k^T), stores them to its f32 scratch, runs the online
// softmax there in scalar code (SG / 16 lanes per row, each on pairs of columns), writes P as
// f16, rescales its output fragments by the row factors and adds P v. Fragments of one type
// share one element layout, so a per-row factor is applied element by element against a
// fragment loaded from a [16][16] matrix of the factors, without a trip of the output through
// shared memory. The output stays in f32 fragments until the end. With STAGES 2 there are two
// buffers of k and v: the next block is deposited into the other one right after this one's
// arithmetic, so a block costs one workgroup barrier instead of two.
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_vote : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define PASS FA_FWD_CM
#define ELEM16 1
#include "flash_attention.glsl"

// Specialization (constant ids of flash_attention.glsl): BQ = 16 NSG, BK a multiple of 16,
// DMAX = head_dim (a multiple of 16), RX = subgroup size (16, 32 or 64), RY = NSG; and its own
// STAGES, the buffers of k and v (1 or 2). SPARSE modules take the layout's blocks as 9 and 10.
layout(constant_id = 8) const uint STAGES = 1;
const uint NSG = RY;
const uint SG = RX;
const uint THREADS = SG * NSG;
const uint LPR = SG / 16;      // lanes per score row
const uint PAIRS = BK / (2 * LPR);  // column pairs per lane
const uint HS = DMAX + 8;      // halves per staged row
const uint PS = BK + 8;        // halves per P row
const uint FD = DMAX / 16;     // output fragments per subgroup
const uint FK = BK / 16;       // key fragments per block

// f16 staging, in units of 8 halves: q [BQ][HS], STAGES buffers of k and v [BK][HS] each,
// P [NSG * 16][PS].
const uint KVB = BK * HS / 8;  // one of k or v
const uint QB = 0, KB = QB + BQ * HS / 8, PB = KB + STAGES * 2 * KVB;
shared uvec4 hs[PB + NSG * 16 * PS / 8];
// f32, in units of 4 floats: per-subgroup scratch [16][BK] (scores, then output fragments),
// per-row partials [NSG * 16][LPR], per-row factors [NSG * 16].
const uint SB = 0, RB = SB + NSG * 16 * BK, AB = RB + NSG * 16 * LPR;
shared uvec4 fs[(AB + NSG * 16 + 3) / 4];

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

// A key block of k and v passes through registers: fetch() issues the global loads of the next
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
void deposit(uint buf) {
  const uint kd = KB + buf * 2 * KVB, vd = kd + KVB;
  [[unroll]] for (uint t = 0; t < PF; ++t) {
    const uint u = gl_LocalInvocationID.x + t * THREADS;
    if (u < BK * (DMAX / 8)) {
      const uint r = u / (DMAX / 8), c = u - r * (DMAX / 8);
      hs[kd + r * (HS / 8) + c] = pk[t];
      hs[vd + r * (HS / 8) + c] = pv[t];
    }
  }
}

void sync_subgroup() {
  subgroupMemoryBarrierShared();
  subgroupBarrier();
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
  const uint scratch = SB + s * 16 * BK;

  [[unroll]] for (uint f = 0; f < FD; ++f) o[f] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
  const float sink = flag(F_SINKS) ? LOAD(sinks, head, sinks_dtype()) * LOG2E : NEG;
  float m = sink, l = flag(F_SINKS) && part == 0u ? 1.0 : 0.0;
  stage_q(QB, BQ, q_start + i0, rows, pc.heads, head);
  barrier();
  [[unroll]] for (uint f = 0; f < FD; ++f) coopMatLoadNV(qf[f], hs, QB + (s * 16 * HS + f * 16) / 8, HS / 8, false);

  const int jlo = max(0, key_lo(i0)), jhi = min(k_len - 1, key_hi(i0 + rows - 1));
  Walk tiles = KEY_TILES(head, i0, jlo / int(BK), jlo <= jhi ? jhi / int(BK) : -1, int(BK));
  // The next block is known one step ahead: its keys travel while this one is computed.
  int kb = walk_next(tiles), next = -1;
  if (kb >= 0) {
    fetch(k_start + kb * int(BK), min(int(BK), k_len - kb * int(BK)), pc.kv_heads, hk);
    if (STAGES == 2) deposit(0);
  }
  for (uint step = 0; kb >= 0; ++step, kb = next) {
    const int j0 = kb * int(BK);
    uint buf = STAGES == 2 ? step & 1u : 0u;
    next = walk_next(tiles);
    uint kbuf = KB + buf * 2 * KVB, vbuf = kbuf + KVB;
    // Two stages: every invocation is done with the other buffer (read in the last block) and this
    // one is deposited. One stage: the same for the one buffer, with a deposit between.
    barrier();
    if (STAGES == 1) {
      deposit(0);
      barrier();
    }
    if (next >= 0) fetch(k_start + next * int(BK), min(int(BK), k_len - next * int(BK)), pc.kv_heads, hk);

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
    // Where the mask allows every key of the block to every row of the workgroup and no logit
    // transform applies (long unmasked sequences, the interior of a causal one), the scaled score
    // is the logit as it is.
    const bool plain = (pc.flags & (F_BIAS | F_SOFTCAP | F_SEGMENTS)) == 0u && i0 + int(BQ) <= q_len &&
                       j0 + int(BK) <= k_len && j0 >= key_lo(i0 + int(BQ) - 1) && j0 + int(BK) - 1 <= key_hi(i0);
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

    // o += P v.
    [[unroll]] for (uint kk = 0; kk < BK; kk += 16) {
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a;
      coopMatLoadNV(a, hs, PB + (s * 16 * PS + kk) / 8, PS / 8, false);
      [[unroll]] for (uint f = 0; f < FD; ++f) {
        fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> b;
        coopMatLoadNV(b, hs, vbuf + (kk * HS + f * 16) / 8, HS / 8, false);
        o[f] = coopMatMulAddNV(a, b, o[f]);
      }
    }
    if (STAGES == 2 && next >= 0) deposit(buf ^ 1u);
  }

  // Row sums from the lanes' shares, then out = o / l.
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
