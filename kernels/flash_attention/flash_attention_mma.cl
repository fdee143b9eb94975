// flash_attention forward on NVIDIA tensor cores through inline PTX: mma.sync.m16n8k16 with f16
// or bf16 operands and f32 accumulation, for f16/bf16 q, k, v, out and head_dim D (a multiple of
// 16, at most 128). It includes flash_attention_common.cl, whose Params, masks, logit transform,
// dropout and index helpers it shares with the scalar passes: the same semantics, option by
// option.
//
// A workgroup of NW warps owns 16 RT NW query rows of one (sequence, head); warp w owns RT tiles
// of 16 rows, its q fragments in registers. Per block of BK keys, k is staged in local memory as
// it is and v transposed, so both B fragments are 32-bit loads with no bank conflicts (row
// strides of 4 mod 32 words); the next block's k and v travel through registers while this one
// is computed. With STAGES 2 there are two such buffers: the next block goes into the other one
// right after this one's arithmetic, so a block costs one barrier instead of two, for twice the
// local memory. With MMA_ASYNC 1 the registers are skipped: cp.async copies k and v as they are
// (rows padded by 16 bytes) into a ring of STAGES (2 or 3) buffers, STAGES - 1 blocks in flight
// while one is computed, one barrier a block (STAGES 1: k and v apart, each copied under the
// other's arithmetic, two barriers); both B fragments come from ldmatrix.x4 (v's with .trans,
// so nothing is staged transposed), which also reads four fragments an instruction where the
// 32-bit loads read one. Scores stay in registers in the accumulator layout of m16n8k16 (thread
// (g, t) = (lane / 4, lane % 4) holds rows g and g + 8, columns 2t and 2t + 1 of each 8-column
// tile), which is also the layout of P's A fragments, so the online softmax needs only shuffles
// within a quad and P never leaves registers. Blocks the mask allows whole, with no bias, cap or
// segments, take the scaled scores as they are; others go through logit() element by element.
//
// Defines: D, NW (warps a workgroup), RT (16-row tiles a warp, forward), BK (keys a block:
// forward and dq), BQ (query rows a block: dk/dv), STAGES (local buffers of k and v, forward: 1 or
// 2, with MMA_ASYNC 1 to 3), MMA_ASYNC (forward: 0 k and v through registers, 1 by cp.async),
// BWD_ASYNC (dq and dk/dv: 0 rows staged through registers, some transposed; 1 by cp.async, B
// fragments by ldmatrix), BF16 (0: f16 operands, 1: bf16).
#include "flash_attention_common.cl"
#include "common/clc_mma.h"

#define MMA_ROWS (16 * RT * NW)
#define DW (D / 2)              // words (operand pairs) per row
#define KSTR (DW + 4)           // local row stride of k in words
#define VSTR (BK / 2 + 4)       // local row stride of v^T in words
#define STILES (BK / 8)         // score tiles of 8 keys
#define OTILES (D / 8)          // output tiles of 8 columns
#define KSTEPS (D / 16)         // k-steps of q k^T
#define KTASKS (BK * (DW / 4))  // uint4 copies of k per block
#define VTASKS ((BK / 2) * (D / 8))  // pairs of uint4 of v per block
#define KPT ((KTASKS + 32 * NW - 1) / (32 * NW))
#define VPT ((VTASKS + 32 * NW - 1) / (32 * NW))
#define BUF_WORDS (BK * KSTR + D * VSTR)  // one local buffer of k and v^T
#ifndef STAGES
#define STAGES 1
#endif
#ifndef MMA_ASYNC
#define MMA_ASYNC 0
#endif
#if MMA_ASYNC
#if STAGES < 1 || STAGES > 3
#error "MMA_ASYNC needs STAGES 1, 2 or 3"
#endif
// k and v rows as they are in memory, padded by 16 bytes: (2 D + 16) / 16 = D / 8 + 1 is odd, so
// the 8 rows of an ldmatrix matrix fall on 8 distinct 16-byte bank groups.
#define ROWB (2 * D + 16)
#define TILE_BYTES (BK * ROWB)
#define STAGE_BYTES (2 * TILE_BYTES)
#define CPT ((KTASKS + 32 * NW - 1) / (32 * NW))  // 16-byte copies a thread, of k and of v
#endif

__kernel __attribute__((reqd_work_group_size(32 * NW, 1, 1))) void fa_fwd_mma(FWD_ARGS) {
  EJK_LOCAL_BIND(float, sh)
  const Params* pc = &P;
  const Ctx cx = make_ctx(pc, get_group_id(2), cu_q, cu_k);
  const Ctx* c = &cx;
  const int tid = get_local_id(0), lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const uint head = get_group_id(1), hk = head / pc->group;
  const int i0 = (int)get_group_id(0) * MMA_ROWS;
  if (i0 >= c->q_len) return;  // packed input: this sequence is shorter than max_seqlen_q
  const int rows = min(MMA_ROWS, c->q_len - i0);
  const int w0 = i0 + warp * 16 * RT;  // this warp's first row; thread rows w0 + 16 r + g (+ 8)
  __local uint* const buffers = (__local uint*)sh;
  __global const uint* qw = (__global const uint*)q;
  __global const uint4* k4 = (__global const uint4*)k;
  __global const uint4* v4 = (__global const uint4*)v;

  // q fragments: a0 (row g, word 8s + t), a1 (row g + 8), a2 (row g, word 8s + 4 + t), a3.
  uint qf[RT][KSTEPS][4];
#pragma unroll
  for (int r = 0; r < RT; ++r) {
    const int ia = min(w0 + 16 * r + g, c->q_len - 1), ib = min(w0 + 16 * r + g + 8, c->q_len - 1);
    __global const uint* pa = qw + ((size_t)(c->q_start + ia) * pc->heads + head) * DW;
    __global const uint* pb = qw + ((size_t)(c->q_start + ib) * pc->heads + head) * DW;
#pragma unroll
    for (int s = 0; s < KSTEPS; ++s) {
      qf[r][s][0] = pa[8 * s + t];
      qf[r][s][1] = pb[8 * s + t];
      qf[r][s][2] = pa[8 * s + 4 + t];
      qf[r][s][3] = pb[8 * s + 4 + t];
    }
  }
  float o[RT][OTILES][4], m[RT][2], l[RT][2];
  // A sink is one more logit with no value: the running maximum starts at it and its weight
  // starts the row sum (held by one thread of the quad, as the sums are per thread until the end).
  const float sink = HAS(F_SINKS) ? ejk_load(sinks, head, SINKS_DT) * LOG2E : NEG;
#pragma unroll
  for (int r = 0; r < RT; ++r) {
#pragma unroll
    for (int n = 0; n < OTILES; ++n) o[r][n][0] = o[r][n][1] = o[r][n][2] = o[r][n][3] = 0.0f;
    m[r][0] = m[r][1] = sink;
    l[r][0] = l[r][1] = HAS(F_SINKS) && t == 0 ? 1.0f : 0.0f;
  }

  const int jlo = max(0, key_lo(pc, c, i0)), jhi = min(c->k_len - 1, key_hi(pc, c, i0 + rows - 1));
  Walk tiles = KEY_TILES(head, i0, jlo / BK, jlo <= jhi ? jhi / BK : -1, BK);
  const bool plain_options = (pc->flags & (F_BIAS | F_SOFTCAP | F_SEGMENTS)) == 0u;
#if MMA_ASYNC
  // The ring: block walk index w in stage w % STAGES, STAGES - 1 blocks in flight ahead of the
  // one computed. The argument's local memory is aligned only to its type; 16 more bytes than
  // the ring are asked for, and the ring starts at the first 16-byte boundary. One stage holds k
  // and v apart instead: v's copy runs under q k^T and the next block's k under the softmax and
  // p v (FlashAttention-2's order), two barriers a block for half the local memory of two stages.
  const uint ring = (EJK_SMEM(sh) + 15u) & ~15u;
  // Block KB's rows of SRC (k4 or v4) at local address DST, rows past the sequence zero-filled
  // (a masked key's v must be a zero, not whatever the memory holds, as its weight 0 times NaN
  // is NaN). Not committed.
#define COPY_TILE(KB, DST, SRC)                                                                              \
  _Pragma("unroll") for (int x_ = 0; x_ < CPT; ++x_) {                                                       \
    const int u_ = tid + x_ * 32 * NW, r_ = u_ / (D / 8), cc_ = u_ - r_ * (D / 8), j_ = (KB) * BK + r_;       \
    if (u_ < KTASKS) {                                                                                       \
      const bool in_ = j_ < c->k_len;                                                                        \
      const size_t at_ = ((size_t)(c->k_start + (in_ ? j_ : 0)) * pc->kv_heads + hk) * (D / 8) + cc_;        \
      cp16((DST) + (uint)(r_ * ROWB + 16 * cc_), (SRC) + at_, in_ ? 16u : 0u);                               \
    }                                                                                                        \
  }
  // Block KB (none: -1) into stage B: one commit group a call, empty or not, so that CP_WAIT
  // counts blocks.
#define ISSUE(KB, B)                                                                                         \
  {                                                                                                          \
    if ((KB) >= 0) {                                                                                         \
      const uint kd_ = ring + (uint)(B) * STAGE_BYTES;                                                       \
      COPY_TILE(KB, kd_, k4)                                                                                 \
      COPY_TILE(KB, kd_ + TILE_BYTES, v4)                                                                    \
    }                                                                                                        \
    cp_commit();                                                                                             \
  }
  // Lane offsets of the x4 loads (lanes 8i .. 8i + 7 address matrix i's rows). k, not
  // transposed: matrices (keys +0, d +0), (+0, +8), (+8, +0), (+8, +8), the b0 and b1 of two
  // score tiles. v, transposed: (keys +0, d +0), (+8, +0), (+0, +8), (+8, +8), the b0 and b1 of
  // two output tiles.
  const uint koff = (uint)((8 * (lane >> 4) + (lane & 7)) * ROWB + 16 * ((lane >> 3) & 1));
  const uint voff = (uint)((8 * ((lane >> 3) & 1) + (lane & 7)) * ROWB + 16 * (lane >> 4));
  int kb = walk_next(&tiles), ahead = -1;  // ahead: the block after kb (three stages)
#if STAGES == 1
  if (kb >= 0) {
    COPY_TILE(kb, ring, k4)
  }
  cp_commit();
#else
  ISSUE(kb, 0)
  if (STAGES == 3) {
    ahead = walk_next(&tiles);
    ISSUE(ahead, 1)
  }
#endif
  for (int buf = 0; kb >= 0; buf = buf == STAGES - 1 ? 0 : buf + 1) {
    const int j0 = kb * BK;
#if STAGES == 1
    // This block's k has landed everywhere, and every warp is done with the last block's v.
    CP_WAIT(0);
    barrier(CLK_LOCAL_MEM_FENCE);
    COPY_TILE(kb, ring + TILE_BYTES, v4)
    cp_commit();
    const uint ks = ring, vs = ring + TILE_BYTES;
#else
    // This thread's copies of this block have landed; after the barrier everyone's have, and
    // every warp is done with the stage the last block was computed from, which is refilled
    // now: one barrier a block.
    CP_WAIT(STAGES - 2);
    barrier(CLK_LOCAL_MEM_FENCE);
    const int next = walk_next(&tiles);
    ISSUE(next, buf == 0 ? STAGES - 1 : buf - 1)
    const uint ks = ring + (uint)buf * STAGE_BYTES, vs = ks + TILE_BYTES;
#endif
#else
  uint4 pk[KPT], pv[VPT][2];
#define FETCH(J0)                                                                                            \
  {                                                                                                          \
    _Pragma("unroll") for (int x = 0; x < KPT; ++x) {                                                      \
      const int u = tid + x * 32 * NW, r = u / (DW / 4), cc = u - r * (DW / 4);                             \
      pk[x] = (uint4)(0);                                                                                    \
      if (u < KTASKS && (J0) + r < c->k_len)                                                                 \
        pk[x] = k4[((size_t)(c->k_start + (J0) + r) * pc->kv_heads + hk) * (DW / 4) + cc];                   \
    }                                                                                                        \
    _Pragma("unroll") for (int x = 0; x < VPT; ++x) {                                                      \
      const int u = tid + x * 32 * NW, cc = u / (BK / 2), p = u - cc * (BK / 2), j = (J0) + 2 * p;           \
      pv[x][0] = pv[x][1] = (uint4)(0);                                                                      \
      if (u < VTASKS && j < c->k_len) pv[x][0] = v4[((size_t)(c->k_start + j) * pc->kv_heads + hk) * (D / 8) + cc]; \
      if (u < VTASKS && j + 1 < c->k_len)                                                                    \
        pv[x][1] = v4[((size_t)(c->k_start + j + 1) * pc->kv_heads + hk) * (D / 8) + cc];                    \
    }                                                                                                        \
  }
  // The fetched block into local buffer B: k as it is, v transposed (keys 2p and 2p + 1, columns
  // 8cc .. 8cc + 7 -> words vt[8cc + e][p]).
#define DEPOSIT(B)                                                                                           \
  {                                                                                                          \
    __local uint* const kd = buffers + (B) * BUF_WORDS;                                                      \
    __local uint* const vd = kd + BK * KSTR;                                                                 \
    _Pragma("unroll") for (int x = 0; x < KPT; ++x) {                                                      \
      const int u = tid + x * 32 * NW, r = u / (DW / 4), cc = u - r * (DW / 4);                             \
      if (u < KTASKS) vstore4(pk[x], 0, kd + r * KSTR + 4 * cc);                                             \
    }                                                                                                        \
    _Pragma("unroll") for (int x = 0; x < VPT; ++x) {                                                      \
      const int u = tid + x * 32 * NW, cc = u / (BK / 2), p = u - cc * (BK / 2);                             \
      if (u < VTASKS) {                                                                                      \
        const uint4 a = pv[x][0], b = pv[x][1];                                                              \
        __local uint* dst = vd + 8 * cc * VSTR + p;                                                          \
        dst[0 * VSTR] = (a.s0 & 0xffffu) | (b.s0 << 16);                                                     \
        dst[1 * VSTR] = (a.s0 >> 16) | (b.s0 & 0xffff0000u);                                                 \
        dst[2 * VSTR] = (a.s1 & 0xffffu) | (b.s1 << 16);                                                     \
        dst[3 * VSTR] = (a.s1 >> 16) | (b.s1 & 0xffff0000u);                                                 \
        dst[4 * VSTR] = (a.s2 & 0xffffu) | (b.s2 << 16);                                                     \
        dst[5 * VSTR] = (a.s2 >> 16) | (b.s2 & 0xffff0000u);                                                 \
        dst[6 * VSTR] = (a.s3 & 0xffffu) | (b.s3 << 16);                                                     \
        dst[7 * VSTR] = (a.s3 >> 16) | (b.s3 & 0xffff0000u);                                                 \
      }                                                                                                      \
    }                                                                                                        \
  }
  // The next tile is known one step ahead: its keys travel while this one is computed.
  int kb = walk_next(&tiles), next = -1;
  if (kb >= 0) {
    FETCH(kb * BK)
    if (STAGES == 2) DEPOSIT(0)
  }
  for (int step = 0; kb >= 0; ++step, kb = next) {
    const int j0 = kb * BK;
    const int buf = STAGES == 2 ? step & 1 : 0;
    next = walk_next(&tiles);
    __local const uint* const ks = buffers + buf * BUF_WORDS;
    __local const uint* const vt = ks + BK * KSTR;
    // Two stages: every thread is done with the other buffer (read in the last block) and this
    // one is deposited. One stage: the same for the one buffer, with a deposit between.
    barrier(CLK_LOCAL_MEM_FENCE);
    if (STAGES == 1) {
      DEPOSIT(0)
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (next >= 0) FETCH(next * BK)
#endif

    // s = q k^T for this warp's rows and the block's keys.
    float s[RT][STILES][4], alpha[RT][2];
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
      for (int n = 0; n < STILES; ++n) s[r][n][0] = s[r][n][1] = s[r][n][2] = s[r][n][3] = 0.0f;
#if MMA_ASYNC
#pragma unroll
    for (int st = 0; st < KSTEPS; ++st)
#pragma unroll
      for (int n = 0; n < STILES; n += 2) {
        uint b[4];
        ldsm_x4(b, ks + koff + (uint)(8 * n * ROWB + 32 * st));
#pragma unroll
        for (int r = 0; r < RT; ++r) {
          mma(s[r][n], qf[r][st][0], qf[r][st][1], qf[r][st][2], qf[r][st][3], b[0], b[1]);
          mma(s[r][n + 1], qf[r][st][0], qf[r][st][1], qf[r][st][2], qf[r][st][3], b[2], b[3]);
        }
      }
#else
#pragma unroll
    for (int st = 0; st < KSTEPS; ++st)
#pragma unroll
      for (int n = 0; n < STILES; ++n) {
        __local const uint* kr = ks + (8 * n + g) * KSTR + 8 * st + t;
        const uint b0 = kr[0], b1 = kr[4];
#pragma unroll
        for (int r = 0; r < RT; ++r) mma(s[r][n], qf[r][st][0], qf[r][st][1], qf[r][st][2], qf[r][st][3], b0, b1);
      }
#endif
#if MMA_ASYNC && STAGES == 1
    // This block's v has landed everywhere, and every warp is done with its k: the next block's
    // k goes in under the softmax and p v.
    CP_WAIT(0);
    barrier(CLK_LOCAL_MEM_FENCE);
    const int next = walk_next(&tiles);
    if (next >= 0) {
      COPY_TILE(next, ring, k4)
    }
    cp_commit();
#endif

    // Online softmax in base 2; P replaces the scores (times the dropout mask, after the row
    // sums: lse does not see dropout). What the options add runs in loops of its own, so the
    // unrolled common path stays compact in the instruction cache.
    // A block the mask allows whole keeps its raw scores: the scale enters the maximum once and
    // each exponent through one fma (a positive scale keeps the maximum where it is).
    const bool whole = plain_options && pc->qscale > 0.0f && i0 + MMA_ROWS <= c->q_len && j0 + BK <= c->k_len &&
                       j0 >= key_lo(pc, c, i0 + MMA_ROWS - 1) && j0 + BK - 1 <= key_hi(pc, c, i0);
    const float sc = whole ? pc->qscale : 1.0f;
    if (!whole) {
#pragma unroll
      for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int n = 0; n < STILES; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            s[r][n][e] = logit(pc, c, s[r][n][e] * pc->qscale, head, w0 + 16 * r + g + 8 * (e >> 1),
                               j0 + 8 * n + 2 * t + (e & 1), bias, q_seg, k_seg);
    }
    bool rescale = false;  // whether any row of the warp has a new maximum
#pragma unroll
    for (int r = 0; r < RT; ++r) {
      float mx[2] = {NEG, NEG};
#pragma unroll
      for (int n = 0; n < STILES; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) mx[e >> 1] = fmax(mx[e >> 1], s[r][n][e]);
      float sum[2] = {0.0f, 0.0f};
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float top = fmax(m[r][h], max_quad(mx[h]) * sc);
        alpha[r][h] = top == NEG ? 1.0f : ex2(m[r][h] - top);
        rescale |= alpha[r][h] != 1.0f;
        m[r][h] = top;
      }
#pragma unroll
      for (int n = 0; n < STILES; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float top = m[r][e >> 1];
          s[r][n][e] = top == NEG ? 0.0f : ex2(fma(s[r][n][e], sc, -top));
          sum[e >> 1] += s[r][n][e];
        }
#pragma unroll
      for (int h = 0; h < 2; ++h) l[r][h] = l[r][h] * alpha[r][h] + sum[h];
    }
    // Once the maxima settle most blocks leave every row's maximum where it was: the warp skips
    // the rescaling of o then (one vote instead of 64 RT multiplies).
    if (warp_any(rescale)) {
#pragma unroll
      for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int n = 0; n < OTILES; ++n) {
          o[r][n][0] *= alpha[r][0];
          o[r][n][1] *= alpha[r][0];
          o[r][n][2] *= alpha[r][1];
          o[r][n][3] *= alpha[r][1];
        }
    }
    if (HAS(F_DROPOUT)) {
#pragma unroll
      for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int n = 0; n < STILES; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (s[r][n][e] != 0.0f)
              s[r][n][e] *= keep(pc, c, head, w0 + 16 * r + g + 8 * (e >> 1), j0 + 8 * n + 2 * t + (e & 1));
    }

    // o += p v: p's A fragments are the score tiles 2 st and 2 st + 1 as they lie.
#pragma unroll
    for (int st = 0; st < BK / 16; ++st) {
      uint a[RT][4];
#pragma unroll
      for (int r = 0; r < RT; ++r) {
        a[r][0] = pack2(s[r][2 * st][0], s[r][2 * st][1]);
        a[r][1] = pack2(s[r][2 * st][2], s[r][2 * st][3]);
        a[r][2] = pack2(s[r][2 * st + 1][0], s[r][2 * st + 1][1]);
        a[r][3] = pack2(s[r][2 * st + 1][2], s[r][2 * st + 1][3]);
      }
#if MMA_ASYNC
#pragma unroll
      for (int n = 0; n < OTILES; n += 2) {
        uint b[4];
        ldsm_x4_t(b, vs + voff + (uint)(16 * st * ROWB + 16 * n));
#pragma unroll
        for (int r = 0; r < RT; ++r) {
          mma(o[r][n], a[r][0], a[r][1], a[r][2], a[r][3], b[0], b[1]);
          mma(o[r][n + 1], a[r][0], a[r][1], a[r][2], a[r][3], b[2], b[3]);
        }
      }
#else
      __local const uint* vr = vt + g * VSTR + 8 * st + t;
#pragma unroll
      for (int n = 0; n < OTILES; ++n) {
        const uint b0 = vr[8 * n * VSTR], b1 = vr[8 * n * VSTR + 4];
#pragma unroll
        for (int r = 0; r < RT; ++r) mma(o[r][n], a[r][0], a[r][1], a[r][2], a[r][3], b0, b1);
      }
#endif
    }
#if MMA_ASYNC
    if (STAGES == 3) {
      kb = ahead;
      ahead = next;
    } else {
      kb = next;
    }
  }
#undef ISSUE
#undef COPY_TILE
#else
    if (STAGES == 2 && next >= 0) DEPOSIT(buf ^ 1)
  }
#undef FETCH
#undef DEPOSIT
#endif

  __global uint* ow = (__global uint*)out;
#pragma unroll
  for (int r = 0; r < RT; ++r)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float total = sum_quad(l[r][h]);
      const float inv = total > 0.0f ? 1.0f / total : 0.0f;
      const int i = w0 + 16 * r + g + 8 * h;
      if (i < c->q_len) {
        __global uint* po = ow + ((size_t)(c->q_start + i) * pc->heads + head) * DW;
#pragma unroll
        for (int n = 0; n < OTILES; ++n) po[4 * n + t] = pack2(o[r][n][2 * h] * inv, o[r][n][2 * h + 1] * inv);
        if (t == 0) lse[lse_index(pc, c, head, i)] = total > 0.0f ? (m[r][h] + log2(total)) * LN2 : -INFINITY;
      }
    }
}

// ---- backward --------------------------------------------------------------------------------
// FlashAttention-2 without atomics on the same fragments, after the scalar program's prep pass
// (delta = dout . out per row) and before its finish pass (fixed-order dsoftmax_aux and
// broadcast dbias sums). P is recomputed from the saved lse; dU = P (dP - delta) (times the
// cap's derivative) enters the tensor cores in the operand type, as FlashAttention-2 does.

// Rows [0, n) of `dst` (stride KSTR words) = tokens tok0.. of head h of src (nh heads); zero
// from `valid` on.
void stage_rows(__local uint* dst, int n, int tok0, int valid, uint nh, uint h, __global const uint4* src, int tid) {
  for (int u = tid; u < n * (DW / 4); u += 32 * NW) {
    const int r = u / (DW / 4), cc = u - r * (DW / 4);
    uint4 x = (uint4)(0);
    if (r < valid) x = src[((size_t)(tok0 + r) * nh + h) * (DW / 4) + cc];
    vstore4(x, 0, dst + r * KSTR + 4 * cc);
  }
}

// The same rows transposed: dst[d][pair p] (stride `stride` words) holds elements d of rows 2p
// and 2p + 1, so B fragments that reduce over rows are 32-bit loads.
void stage_cols(__local uint* dst, int stride, int n, int tok0, int valid, uint nh, uint h, __global const uint4* src,
                int tid) {
  for (int u = tid; u < (n / 2) * (D / 8); u += 32 * NW) {
    const int cc = u / (n / 2), p = u - cc * (n / 2);
    uint4 a = (uint4)(0), b = (uint4)(0);
    if (2 * p < valid) a = src[((size_t)(tok0 + 2 * p) * nh + h) * (D / 8) + cc];
    if (2 * p + 1 < valid) b = src[((size_t)(tok0 + 2 * p + 1) * nh + h) * (D / 8) + cc];
    __local uint* o = dst + 8 * cc * stride + p;
    o[0 * stride] = (a.s0 & 0xffffu) | (b.s0 << 16);
    o[1 * stride] = (a.s0 >> 16) | (b.s0 & 0xffff0000u);
    o[2 * stride] = (a.s1 & 0xffffu) | (b.s1 << 16);
    o[3 * stride] = (a.s1 >> 16) | (b.s1 & 0xffff0000u);
    o[4 * stride] = (a.s2 & 0xffffu) | (b.s2 << 16);
    o[5 * stride] = (a.s2 >> 16) | (b.s2 & 0xffff0000u);
    o[6 * stride] = (a.s3 & 0xffffu) | (b.s3 << 16);
    o[7 * stride] = (a.s3 >> 16) | (b.s3 & 0xffff0000u);
  }
}

// A fragments of rows r0 .. r0 + 15 (clamped to `last`) of tokens tok0.. of head h.
void load_a(uint f[KSTEPS][4], int r0, int last, int tok0, uint nh, uint h, __global const uint* src, int g, int t) {
  __global const uint* pa = src + ((size_t)(tok0 + min(r0 + g, last)) * nh + h) * DW;
  __global const uint* pb = src + ((size_t)(tok0 + min(r0 + g + 8, last)) * nh + h) * DW;
#pragma unroll
  for (int s = 0; s < KSTEPS; ++s) {
    f[s][0] = pa[8 * s + t];
    f[s][1] = pb[8 * s + t];
    f[s][2] = pa[8 * s + 4 + t];
    f[s][3] = pb[8 * s + 4 + t];
  }
}

// acc[n] (16 x 8 tiles over `tiles` columns) += a b^T, b's rows (stride KSTR words) in local memory.
#define GEMM_ROWS(acc, a, rows_at, tiles)                                                             \
  _Pragma("unroll") for (int st_ = 0; st_ < KSTEPS; ++st_) _Pragma("unroll") for (int n_ = 0; n_ < (tiles); ++n_) { \
    __local const uint* br_ = (rows_at) + (8 * n_ + g) * KSTR + 8 * st_ + t;                           \
    mma(acc[n_], a[st_][0], a[st_][1], a[st_][2], a[st_][3], br_[0], br_[4]);                         \
  }

// acc[n] (16 x 8 tiles over D) += x y, x's A fragments from score tiles xs (16 x `cols`), y's
// transposed rows at cols_at (stride `stride` words).
#define GEMM_COLS(acc, xs, cols, cols_at, stride)                                                     \
  _Pragma("unroll") for (int st_ = 0; st_ < (cols) / 16; ++st_) {                                     \
    const uint a0_ = pack2(xs[2 * st_][0], xs[2 * st_][1]), a1_ = pack2(xs[2 * st_][2], xs[2 * st_][3]); \
    const uint a2_ = pack2(xs[2 * st_ + 1][0], xs[2 * st_ + 1][1]);                                   \
    const uint a3_ = pack2(xs[2 * st_ + 1][2], xs[2 * st_ + 1][3]);                                   \
    __local const uint* cr_ = (cols_at) + g * (stride) + 8 * st_ + t;                                 \
    _Pragma("unroll") for (int n_ = 0; n_ < OTILES; ++n_)                                             \
      mma(acc[n_], a0_, a1_, a2_, a3_, cr_[8 * n_ * (stride)], cr_[8 * n_ * (stride) + 4]);           \
  }

#ifndef BWD_ASYNC
#define BWD_ASYNC 0
#endif
#ifndef BWD_FUSED
#define BWD_FUSED 0
#endif
#ifndef RED_V4
#define RED_V4 0
#endif
#if BWD_FUSED && !BWD_ASYNC
#error "BWD_FUSED needs BWD_ASYNC"
#endif
#ifndef DKDV_STATIC
#define DKDV_STATIC 0
#endif
#if DKDV_STATIC && !BWD_FUSED
#error "DKDV_STATIC is for the fused dk/dv pass"
#endif
#if BWD_ASYNC
// BWD_ASYNC 1: rows as they are in memory, copied by cp.async, rows padded by 16 bytes (an odd
// number of 16-byte units, so ldmatrix's 8 rows hit distinct banks), B fragments by ldmatrix.x4:
// nothing staged transposed, half the local memory.
#define BROWB (2 * D + 16)

// The first 16-byte boundary of the local argument (aligned only to its type): ldmatrix and
// cp.async fault on misaligned addresses, and the host asks for 16 bytes more.
__local uchar* align16(__local float* sh) { return (__local uchar*)sh + ((16u - (EJK_SMEM(sh) & 15u)) & 15u); }

// Rows [0, n) at local address dst = tokens tok0.. of head h of src (nh heads); those at or past
// `valid` zero-filled by the copy's byte count. Not committed.
void copy_rows(uint dst, int n, int tok0, int valid, uint nh, uint h, __global const uint4* src, int tid) {
  for (int u = tid; u < n * (D / 8); u += 32 * NW) {
    const int r = u / (D / 8), cc = u - r * (D / 8);
    const bool in = r < valid;
    cp16(dst + (uint)(r * BROWB + 16 * cc), src + ((size_t)(tok0 + (in ? r : 0)) * nh + h) * (D / 8) + cc, in ? 16u : 0u);
  }
}

// Lane offsets of the x4 loads: rows (for b's rows: two 8-row tiles of a 16-wide k-step) and
// cols (transposed: two 8-column tiles of a 16-row step). See the forward.
#define LANE_OFFSETS                                                                                   \
  const uint roff = (uint)((8 * (lane >> 4) + (lane & 7)) * BROWB + 16 * ((lane >> 3) & 1));          \
  const uint coff = (uint)((8 * ((lane >> 3) & 1) + (lane & 7)) * BROWB + 16 * (lane >> 4));

// GEMM_ROWS with b's rows at local address rows_at.
#define GEMM_ROWS_LD(acc, a, rows_at, tiles)                                                          \
  _Pragma("unroll") for (int st_ = 0; st_ < KSTEPS; ++st_) _Pragma("unroll") for (int n_ = 0; n_ < (tiles); n_ += 2) { \
    uint b_[4];                                                                                       \
    ldsm_x4(b_, (rows_at) + roff + (uint)(8 * n_ * BROWB + 32 * st_));                                \
    mma(acc[n_], a[st_][0], a[st_][1], a[st_][2], a[st_][3], b_[0], b_[1]);                           \
    mma(acc[n_ + 1], a[st_][0], a[st_][1], a[st_][2], a[st_][3], b_[2], b_[3]);                       \
  }

// GEMM_COLS with y's rows (the reduced index) at local address rows_at, transposed by ldmatrix.
#define GEMM_COLS_LD(acc, xs, cols, rows_at)                                                          \
  _Pragma("unroll") for (int st_ = 0; st_ < (cols) / 16; ++st_) {                                     \
    const uint a0_ = pack2(xs[2 * st_][0], xs[2 * st_][1]), a1_ = pack2(xs[2 * st_][2], xs[2 * st_][3]); \
    const uint a2_ = pack2(xs[2 * st_ + 1][0], xs[2 * st_ + 1][1]);                                   \
    const uint a3_ = pack2(xs[2 * st_ + 1][2], xs[2 * st_ + 1][3]);                                   \
    _Pragma("unroll") for (int n_ = 0; n_ < OTILES; n_ += 2) {                                        \
      uint b_[4];                                                                                     \
      ldsm_x4_t(b_, (rows_at) + coff + (uint)(16 * st_ * BROWB + 16 * n_));                           \
      mma(acc[n_], a0_, a1_, a2_, a3_, b_[0], b_[1]);                                                 \
      mma(acc[n_ + 1], a0_, a1_, a2_, a3_, b_[2], b_[3]);                                             \
    }                                                                                                 \
  }
#endif

// Stores rows r0 + g and r0 + g + 8 (those below `valid`) of a 16 x D accumulator times `scale`.
void store_rows(float acc[OTILES][4], int r0, int valid, int tok0, uint nh, uint h, __global uint* dst, float scale,
                int g, int t) {
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int r = r0 + g + 8 * hh;
    if (r < valid) {
      __global uint* p = dst + ((size_t)(tok0 + r) * nh + h) * DW;
#pragma unroll
      for (int n = 0; n < OTILES; ++n) p[4 * n + t] = pack2(acc[n][2 * hh] * scale, acc[n][2 * hh + 1] * scale);
    }
  }
}

// The scaled scores s (16 x 8 tiles) become logits z in place: the common unmasked block as it is,
// others through logit() in a loop of its own (see the forward). Tile x, element e is at row
// row0 + g + 8 (e >> 1) and column col0 + 8 x + 2 t + (e & 1), or transposed (rows as columns).
#define TO_LOGITS(s, tiles, whole, h, row0, col0, transposed)                                           \
  {                                                                                                   \
    _Pragma("unroll") for (int x_ = 0; x_ < (tiles); ++x_) _Pragma("unroll") for (int e_ = 0; e_ < 4; ++e_) \
      s[x_][e_] *= pc->qscale;                                                                        \
    if (!(whole)) {                                                                                   \
      _Pragma("unroll") for (int x_ = 0; x_ < (tiles); ++x_) _Pragma("unroll") for (int e_ = 0; e_ < 4; ++e_) { \
        const int r_ = (row0) + g + 8 * (e_ >> 1), c_ = (col0) + 8 * x_ + 2 * t + (e_ & 1);            \
        s[x_][e_] = transposed ? logit(pc, c, s[x_][e_], (h), c_, r_, bias, q_seg, k_seg)              \
                               : logit(pc, c, s[x_][e_], (h), r_, c_, bias, q_seg, k_seg);             \
      }                                                                                               \
    }                                                                                                 \
  }

// dU = P (dP - delta) from the logit z, dP (dout . v, dropout applied) and the row's lse (base 2)
// and delta, with the cap's derivative 1 - tanh^2 where a cap is set.
float grad_logit(const Params* pc, float z, float dp, float lse2, float dlt, float* p_out) {
  const float p = z == NEG || isinf(lse2) ? 0.0f : ex2(z - lse2);
  float du = p * (dp - dlt);
  if (HAS(F_SOFTCAP) && p != 0.0f) {
    const float th = z / pc->cap2;
    du *= 1.0f - th * th;
  }
  *p_out = p;
  return du;
}

// dq for 16 NW query rows of one head: keys in blocks of BK, k staged as rows (for q k^T) and
// transposed (for dU k), v as rows (for dout v^T). Local memory: 2 BK KSTR + D (BK / 2 + 4) words.
__kernel __attribute__((reqd_work_group_size(32 * NW, 1, 1))) void fa_dq_mma(BWD_ARGS) {
  EJK_LOCAL_BIND(float, sh)
  const Params* pc = &P;
  const Ctx cx = make_ctx(pc, get_group_id(2), cu_q, cu_k);
  const Ctx* c = &cx;
  const int tid = get_local_id(0), lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const uint head = get_group_id(1), hk = head / pc->group;
  const int i0 = (int)get_group_id(0) * 16 * NW;
  if (i0 >= c->q_len) return;
  const int rows = min(16 * NW, c->q_len - i0), w0 = i0 + 16 * warp;
#if !BWD_ASYNC
  const int KTS = BK / 2 + 4;
  __local uint* ks = (__local uint*)sh;
  __local uint* vs = ks + BK * KSTR;
  __local uint* kt = vs + BK * KSTR;
#endif

  uint qf[KSTEPS][4], of[KSTEPS][4];
  load_a(qf, w0, c->q_len - 1, c->q_start, pc->heads, head, (__global const uint*)q, g, t);
  load_a(of, w0, c->q_len - 1, c->q_start, pc->heads, head, (__global const uint*)dout, g, t);
  float lse2[2], dlt[2];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int i = min(w0 + g + 8 * hh, c->q_len - 1);
    lse2[hh] = lse[lse_index(pc, c, head, i)] * LOG2E;
    dlt[hh] = delta[head * pc->total_q + (uint)(c->q_start + i)];
  }
  float acc[OTILES][4];
#pragma unroll
  for (int n = 0; n < OTILES; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  const bool plain_options = (pc->flags & (F_BIAS | F_SOFTCAP | F_SEGMENTS)) == 0u;

  const int jlo = max(0, key_lo(pc, c, i0)), jhi = min(c->k_len - 1, key_hi(pc, c, i0 + rows - 1));
  Walk tiles = KEY_TILES(head, i0, jlo / BK, jlo <= jhi ? jhi / BK : -1, BK);
#if BWD_ASYNC
  // A ring of two stages of k and v rows: the next block's copy is in flight while this one is
  // computed, one barrier a block (as the forward's).
  const uint ring = EJK_SMEM(align16(sh));
  LANE_OFFSETS
#define DQ_ISSUE(KB, B)                                                                                \
  {                                                                                                    \
    if ((KB) >= 0) {                                                                                   \
      const int j_ = (KB) * BK;                                                                        \
      const uint at_ = ring + (uint)(B) * (2 * BK * BROWB);                                            \
      copy_rows(at_, BK, c->k_start + j_, min(BK, c->k_len - j_), pc->kv_heads, hk, (__global const uint4*)k, tid); \
      copy_rows(at_ + BK * BROWB, BK, c->k_start + j_, min(BK, c->k_len - j_), pc->kv_heads, hk,      \
                (__global const uint4*)v, tid);                                                        \
    }                                                                                                  \
    cp_commit();                                                                                       \
  }
  int kb = walk_next(&tiles);
  DQ_ISSUE(kb, 0)
  for (int buf = 0; kb >= 0; buf ^= 1) {
    const int j0 = kb * BK;
    CP_WAIT(0);
    barrier(CLK_LOCAL_MEM_FENCE);
    const int next = walk_next(&tiles);
    DQ_ISSUE(next, buf ^ 1)
    const uint ks = ring + (uint)buf * (2 * BK * BROWB), vs = ks + BK * BROWB;
#else
  for (int kb = walk_next(&tiles); kb >= 0; kb = walk_next(&tiles)) {
    const int j0 = kb * BK, n = min(BK, c->k_len - j0);
    barrier(CLK_LOCAL_MEM_FENCE);
    stage_rows(ks, BK, c->k_start + j0, n, pc->kv_heads, hk, (__global const uint4*)k, tid);
    stage_rows(vs, BK, c->k_start + j0, n, pc->kv_heads, hk, (__global const uint4*)v, tid);
    stage_cols(kt, KTS, BK, c->k_start + j0, n, pc->kv_heads, hk, (__global const uint4*)k, tid);
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
    float s[STILES][4], dp[STILES][4];
#pragma unroll
    for (int x = 0; x < STILES; ++x) s[x][0] = s[x][1] = s[x][2] = s[x][3] = dp[x][0] = dp[x][1] = dp[x][2] = dp[x][3] = 0.0f;
#if BWD_ASYNC
    GEMM_ROWS_LD(s, qf, ks, STILES)
    GEMM_ROWS_LD(dp, of, vs, STILES)
#else
    GEMM_ROWS(s, qf, ks, STILES)
    GEMM_ROWS(dp, of, vs, STILES)
#endif
    const bool whole = plain_options && i0 + 16 * NW <= c->q_len && j0 + BK <= c->k_len &&
                       j0 >= key_lo(pc, c, i0 + 16 * NW - 1) && j0 + BK - 1 <= key_hi(pc, c, i0);
    TO_LOGITS(s, STILES, whole, head, w0, j0, false)
    if (HAS(F_DROPOUT)) {
#pragma unroll
      for (int x = 0; x < STILES; ++x)
#pragma unroll
        for (int e = 0; e < 4; ++e) dp[x][e] *= keep(pc, c, head, w0 + g + 8 * (e >> 1), j0 + 8 * x + 2 * t + (e & 1));
    }
#pragma unroll
    for (int x = 0; x < STILES; ++x)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float p;
        s[x][e] = grad_logit(pc, s[x][e], dp[x][e], lse2[e >> 1], dlt[e >> 1], &p);
      }
#if BWD_ASYNC
    GEMM_COLS_LD(acc, s, BK, ks)
    kb = next;
  }
#undef DQ_ISSUE
#else
    GEMM_COLS(acc, s, BK, kt, KTS)
  }
#endif
  store_rows(acc, w0, c->q_len, c->q_start, pc->heads, head, (__global uint*)dq, pc->softmax_scale, g, t);
}

#if BWD_FUSED
#define DSB (2 * BQ + 16)
// dq of a query block's rows (i0 on, `rows` of them, head h) += dS k over a dk/dv workgroup's
// keys, dS^T at local address dss (keys as rows), k's rows at kts (read at LANE_OFFSETS' coff):
// warp w takes columns [w D / NW, (w + 1) D / NW), every key, so no two warps add to the same
// element; the sums of the workgroups meet in f32 by red.add.
void dq_add(__global float* dqsum, const Params* pc, const Ctx* c, uint h, int i0, int rows, uint dss, uint kts,
            uint coff, int warp, int lane) {
  const int g = lane >> 2, t = lane & 3;
  const uint aoff = (uint)((8 * (lane >> 4) + (lane & 7)) * DSB + 16 * ((lane >> 3) & 1));
  const int c0 = warp * (D / NW);
  float acc[BQ / 16][D / NW / 8][4];
#pragma unroll
  for (int m = 0; m < BQ / 16; ++m)
#pragma unroll
    for (int x = 0; x < D / NW / 8; ++x) acc[m][x][0] = acc[m][x][1] = acc[m][x][2] = acc[m][x][3] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < NW; ++ks)
#pragma unroll
    for (int m = 0; m < BQ / 16; ++m) {
      uint a[4];
      ldsm_x4_t(a, dss + aoff + (uint)(16 * ks * DSB + 32 * m));
#pragma unroll
      for (int x = 0; x < D / NW / 8; x += 2) {
        uint b[4];
        ldsm_x4_t(b, kts + coff + (uint)(16 * ks * BROWB + 2 * c0 + 16 * x));
        mma(acc[m][x], a[0], a[1], a[2], a[3], b[0], b[1]);
        mma(acc[m][x + 1], a[0], a[1], a[2], a[3], b[2], b[3]);
      }
    }
#if RED_V4
  // Four adjacent columns a lane: lanes t and t ^ 1 swap halves, the even one taking row g
  // and the odd one row g + 8, so a quad adds 16 aligned bytes of each row a red.
  const int odd = t & 1;
#pragma unroll
  for (int m = 0; m < BQ / 16; ++m) {
    const int r = 16 * m + g + 8 * odd;
    __global float* p = dqsum + ((size_t)(c->q_start + i0 + r) * pc->heads + h) * D + c0 + 2 * (t & ~1);
#pragma unroll
    for (int x = 0; x < D / NW / 8; ++x) {
      const float y0 = shfl_xor(odd ? acc[m][x][0] : acc[m][x][2], 1);
      const float y1 = shfl_xor(odd ? acc[m][x][1] : acc[m][x][3], 1);
      if (r < rows) {
        if (odd)
          red_add4(p + 8 * x, y0, y1, acc[m][x][2], acc[m][x][3]);
        else
          red_add4(p + 8 * x, acc[m][x][0], acc[m][x][1], y0, y1);
      }
    }
  }
#else
#pragma unroll
  for (int m = 0; m < BQ / 16; ++m)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = 16 * m + g + 8 * hh;
      if (r < rows) {
        __global float* p = dqsum + ((size_t)(c->q_start + i0 + r) * pc->heads + h) * D + c0 + 2 * t;
#pragma unroll
        for (int x = 0; x < D / NW / 8; ++x) {
          red_add(p + 8 * x, acc[m][x][2 * hh]);
          red_add(p + 8 * x + 1, acc[m][x][2 * hh + 1]);
        }
      }
    }
#endif
}
#endif

// dk and dv for 16 NW keys of one kv head, iterating the query heads of its group and every
// query block of BQ rows that can see them: q and dout staged as rows (for k q^T, v dout^T) and
// transposed (for dU^T q, P^T dout). Writes dbias (or its f32 scratch) where a bias is given,
// zeros included for blocks the mask skips. Local memory: 2 BQ KSTR + 2 D (BQ / 2 + 4) + 2 BQ words.
__kernel __attribute__((reqd_work_group_size(32 * NW, 1, 1))) void fa_dkdv_mma(BWD_ARGS) {
#if DKDV_STATIC
  // Past the 48 KiB a local argument gets: a fixed-size array, which NVIDIA's OpenCL gives the
  // shared memory a CUDA kernel can opt into (DeviceInfo::static_local_mem); `sh` is unused.
  __local uint4 dkdv_local[DKDV_STATIC / 16];
  __local uchar* const al = (__local uchar*)dkdv_local;
#else
  EJK_LOCAL_BIND(float, sh)
#endif
  const Params* pc = &P;
  const Ctx cx = make_ctx(pc, get_group_id(2), cu_q, cu_k);
  const Ctx* c = &cx;
  const int tid = get_local_id(0), lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const uint hk = get_group_id(1);
  const int j0 = (int)get_group_id(0) * 16 * NW;
  if (j0 >= c->k_len) return;
  const int n = min(16 * NW, c->k_len - j0), w0 = j0 + 16 * warp;
#if BWD_ASYNC
  // Two stages of q and dout rows, then the rows' lse and delta: the next query block's copy is
  // in flight while this one is computed, one barrier a block.
#if !DKDV_STATIC
  __local uchar* const al = align16(sh);
#endif
  const uint ring = EJK_SMEM(al);
#define QSTAGE_BYTES (2 * BQ * BROWB + 8 * BQ)
  LANE_OFFSETS
#if BWD_FUSED
  // After the ring: this workgroup's k rows (dq's B operand) and a block's dS^T (keys as rows, in
  // the operand type; rows padded by 16 bytes, an odd number of 16-byte units, for ldmatrix).
  const uint kts = ring + 2 * QSTAGE_BYTES, dss = kts + 16 * NW * BROWB;
  __local uchar* const ds_at = al + 2 * QSTAGE_BYTES + 16 * NW * BROWB;
  // Committed with the first query block's copies.
  copy_rows(kts, 16 * NW, c->k_start + j0, n, pc->kv_heads, hk, (__global const uint4*)k, tid);
#endif
#else
  const int QTS = BQ / 2 + 4;
  __local uint* qs = (__local uint*)sh;
  __local uint* ds = qs + BQ * KSTR;
  __local uint* qt = ds + BQ * KSTR;
  __local uint* dt = qt + D * QTS;
  __local float* ls = (__local float*)(dt + D * QTS);
  __local float* dl = ls + BQ;
#endif

  uint kf[KSTEPS][4], vf[KSTEPS][4];
  load_a(kf, w0, c->k_len - 1, c->k_start, pc->kv_heads, hk, (__global const uint*)k, g, t);
  load_a(vf, w0, c->k_len - 1, c->k_start, pc->kv_heads, hk, (__global const uint*)v, g, t);
  float dka[OTILES][4], dva[OTILES][4];
#pragma unroll
  for (int x = 0; x < OTILES; ++x) dka[x][0] = dka[x][1] = dka[x][2] = dka[x][3] = dva[x][0] = dva[x][1] = dva[x][2] = dva[x][3] = 0.0f;
  const bool plain_options = (pc->flags & (F_BIAS | F_SOFTCAP | F_SEGMENTS)) == 0u;
  const bool scratch = HAS(F_DBIAS_SCRATCH);

  // The query blocks of every head of the group, walked one ahead of the one computed. Blocks no
  // query of which sees these keys are passed over, their dbias entries written as zeros.
  const uint hend = (hk + 1u) * pc->group;
  uint wh = hk * pc->group;  // the head walked
  Walk tiles = QUERY_TILES(wh, j0, 0, c->q_len > 0 ? (c->q_len - 1) / BQ : -1, BQ);
#define NEXT_TILE(QH, QT)                                                                              \
  for (;;) {                                                                                           \
    QT = wh < hend ? walk_next(&tiles) : -1;                                                           \
    if (QT < 0) {                                                                                      \
      if (wh >= hend || ++wh >= hend) break;                                                           \
      tiles = QUERY_TILES(wh, j0, 0, c->q_len > 0 ? (c->q_len - 1) / BQ : -1, BQ);                     \
      continue;                                                                                        \
    }                                                                                                  \
    QH = wh;                                                                                           \
    const int i_ = QT * BQ, r_ = min(BQ, c->q_len - i_);                                               \
    if (key_hi(pc, c, i_ + r_ - 1) >= j0 && key_lo(pc, c, i_) <= j0 + n - 1) break;                   \
    if (HAS(F_BIAS))                                                                                   \
      for (int e_ = tid; e_ < r_ * n; e_ += 32 * NW) {                                                 \
        const int rr_ = e_ / n, cc_ = e_ - rr_ * n;                                                    \
        const uint at_ = ((c->seq * pc->heads + QH) * pc->seq_q + (uint)(i_ + rr_)) * pc->seq_k + (uint)(j0 + cc_); \
        if (scratch)                                                                                   \
          dbscr[at_] = 0.0f;                                                                           \
        else                                                                                           \
          ejk_store(dbias, at_, BIAS_DT, 0.0f);                                                        \
      }                                                                                                \
  }
  uint nh = 0;
  int nq;
  NEXT_TILE(nh, nq)
#if BWD_ASYNC
  // Query block QT of head QH (none: -1) into stage B, lse and delta raw (zero past the
  // sequence): one commit group a call, empty or not.
#define QISSUE(QH, QT, B)                                                                              \
  {                                                                                                    \
    if ((QT) >= 0) {                                                                                   \
      const int i_ = (QT) * BQ, r_ = min(BQ, c->q_len - i_);                                           \
      const uint at_ = ring + (uint)(B) * QSTAGE_BYTES;                                                \
      copy_rows(at_, BQ, c->q_start + i_, r_, pc->heads, QH, (__global const uint4*)q, tid);            \
      copy_rows(at_ + BQ * BROWB, BQ, c->q_start + i_, r_, pc->heads, QH, (__global const uint4*)dout, tid); \
      for (int r = tid; r < BQ; r += 32 * NW) {                                                        \
        const bool in_ = r < r_;                                                                       \
        cp4(at_ + 2 * BQ * BROWB + 4 * r, lse + lse_index(pc, c, QH, i_ + (in_ ? r : 0)), in_ ? 4u : 0u); \
        cp4(at_ + 2 * BQ * BROWB + 4 * (BQ + r), delta + (QH) * pc->total_q + (uint)(c->q_start + i_ + (in_ ? r : 0)), \
            in_ ? 4u : 0u);                                                                            \
      }                                                                                                \
    }                                                                                                  \
    cp_commit();                                                                                       \
  }
  QISSUE(nh, nq, 0)
#endif
  for (int buf = 0; nq >= 0; buf ^= 1) {
    const uint h = nh;
    const int i0 = nq * BQ, rows = min(BQ, c->q_len - i0);
#if BWD_ASYNC
    // This block's copies have landed everywhere, and every warp is done with the other stage.
    CP_WAIT(0);
    barrier(CLK_LOCAL_MEM_FENCE);
    NEXT_TILE(nh, nq)
    QISSUE(nh, nq, buf ^ 1)
    const uint qs = ring + (uint)buf * QSTAGE_BYTES, ds = qs + BQ * BROWB;
    __local const float* ls = (__local const float*)(al + buf * QSTAGE_BYTES + 2 * BQ * BROWB);
    __local const float* dl = ls + BQ;
#else
    barrier(CLK_LOCAL_MEM_FENCE);
    stage_rows(qs, BQ, c->q_start + i0, rows, pc->heads, h, (__global const uint4*)q, tid);
    stage_rows(ds, BQ, c->q_start + i0, rows, pc->heads, h, (__global const uint4*)dout, tid);
    stage_cols(qt, QTS, BQ, c->q_start + i0, rows, pc->heads, h, (__global const uint4*)q, tid);
    stage_cols(dt, QTS, BQ, c->q_start + i0, rows, pc->heads, h, (__global const uint4*)dout, tid);
    for (int r = tid; r < BQ; r += 32 * NW) {
      const bool inr = r < rows;
      ls[r] = inr ? lse[lse_index(pc, c, h, i0 + r)] : 0.0f;
      dl[r] = inr ? delta[h * pc->total_q + (uint)(c->q_start + i0 + r)] : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    NEXT_TILE(nh, nq)
#endif
    // Transposed tiles: this thread holds keys w0 + g (+ 8) and queries i0 + 8 x + 2 t (+ 1).
    float s[BQ / 8][4], dp[BQ / 8][4];  // then dU^T and P^T (dropout applied) in their place
#pragma unroll
    for (int x = 0; x < BQ / 8; ++x) s[x][0] = s[x][1] = s[x][2] = s[x][3] = dp[x][0] = dp[x][1] = dp[x][2] = dp[x][3] = 0.0f;
#if BWD_ASYNC
    GEMM_ROWS_LD(s, kf, qs, BQ / 8)
    GEMM_ROWS_LD(dp, vf, ds, BQ / 8)
#else
    GEMM_ROWS(s, kf, qs, BQ / 8)
    GEMM_ROWS(dp, vf, ds, BQ / 8)
#endif
    const bool whole = plain_options && i0 + BQ <= c->q_len && j0 + 16 * NW <= c->k_len &&
                       j0 >= key_lo(pc, c, i0 + BQ - 1) && j0 + 16 * NW - 1 <= key_hi(pc, c, i0);
    TO_LOGITS(s, BQ / 8, whole, h, w0, i0, true)
    if (HAS(F_DROPOUT)) {
#pragma unroll
      for (int x = 0; x < BQ / 8; ++x)
#pragma unroll
        for (int e = 0; e < 4; ++e) dp[x][e] *= keep(pc, c, h, i0 + 8 * x + 2 * t + (e & 1), w0 + g + 8 * (e >> 1));
    }
#pragma unroll
    for (int x = 0; x < BQ / 8; ++x)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qr = 8 * x + 2 * t + (e & 1);
        float p;
        s[x][e] = grad_logit(pc, s[x][e], dp[x][e], ls[qr] * LOG2E, dl[qr], &p);
        dp[x][e] = p;
      }
    if (HAS(F_DROPOUT)) {
#pragma unroll
      for (int x = 0; x < BQ / 8; ++x)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (dp[x][e] != 0.0f) dp[x][e] *= keep(pc, c, h, i0 + 8 * x + 2 * t + (e & 1), w0 + g + 8 * (e >> 1));
    }
    if (HAS(F_BIAS)) {
#pragma unroll
      for (int x = 0; x < BQ / 8; ++x)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qr = 8 * x + 2 * t + (e & 1), i = i0 + qr, j = w0 + g + 8 * (e >> 1);
          if (qr < rows && j < c->k_len) {
            const uint at = ((c->seq * pc->heads + h) * pc->seq_q + (uint)i) * pc->seq_k + (uint)j;
            if (scratch)
              dbscr[at] = s[x][e];
            else
              ejk_store(dbias, at, BIAS_DT, s[x][e]);
          }
        }
    }
#if BWD_FUSED
    // This warp's rows of dS^T (keys w0 + g, + 8; queries 8 x + 2 t, + 1) into local memory.
#pragma unroll
    for (int x = 0; x < BQ / 8; ++x) {
      *(__local uint*)(ds_at + (16 * warp + g) * DSB + 16 * x + 4 * t) = pack2(s[x][0], s[x][1]);
      *(__local uint*)(ds_at + (16 * warp + g + 8) * DSB + 16 * x + 4 * t) = pack2(s[x][2], s[x][3]);
    }
#endif
#if BWD_ASYNC
    GEMM_COLS_LD(dva, dp, BQ, ds)
    GEMM_COLS_LD(dka, s, BQ, qs)
#else
    GEMM_COLS(dva, dp, BQ, dt, QTS)
    GEMM_COLS(dka, s, BQ, qt, QTS)
#endif
#if BWD_FUSED
    // Every warp's dS^T is written; the next block's writes wait for the barrier it starts with.
    barrier(CLK_LOCAL_MEM_FENCE);
    dq_add(dqsum, pc, c, h, i0, rows, dss, kts, coff, warp, lane);
#endif
  }
#undef NEXT_TILE
#if BWD_ASYNC
#undef QISSUE
#undef QSTAGE_BYTES
#endif
  store_rows(dka, w0, c->k_len, c->k_start, pc->kv_heads, hk, (__global uint*)dk, pc->qscale * pc->grad_scale, g, t);
  store_rows(dva, w0, c->k_len, c->k_start, pc->kv_heads, hk, (__global uint*)dv, 1.0f, g, t);
}

// The fused backward's f32 dq sums: zeroed before its dk/dv pass, then dq = softmax_scale times
// them in the operand type, two elements a word.
__kernel void fa_dq_zero_mma(BWD_ARGS) {
  const size_t words = (size_t)P.total_q * P.heads * DW;
  for (size_t u = get_global_id(0); u < words; u += get_global_size(0)) vstore2((float2)(0.0f), u, dqsum);
}

__kernel void fa_dq_convert_mma(BWD_ARGS) {
  const size_t words = (size_t)P.total_q * P.heads * DW;
  for (size_t u = get_global_id(0); u < words; u += get_global_size(0)) {
    const float2 x = vload2(u, dqsum) * P.softmax_scale;
    ((__global uint*)dq)[u] = pack2(x.s0, x.s1);
  }
}
