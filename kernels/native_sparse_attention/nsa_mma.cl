// native_sparse_attention's forward on NVIDIA tensor cores through inline PTX (mma.sync.m16n8k16,
// f16 or bf16 operands, f32 accumulation): nsa.cl's nsa_fwd contract (both branches, the gated
// output, lse) with the query heads of one kv head as the 16 rows of every fragment. Every head of
// a group reads the same keys (the selection is per kv head and the compression per token), so a
// token's keys are read once for its 16 heads and q k^T is a 16-row product.
//
// A workgroup of NW warps per (token, kv head, 16 heads of its group; fewer heads are zero rows).
// The warps split each branch's keys (selection: block i to warp i % NW; compression: tiles of BK
// pooled rows in turn) and run FlashAttention-2's loop on their share, each with its own running
// max, sum and o in registers and its own BK-key tile in local memory: no barrier inside a branch.
// Selection tiles come by cp.async as stored (rows padded by 16 bytes), k and v apart: the next
// tile's k is copied under this one's softmax and p v, its v under the next q k^T. Compression
// tiles are the pool pass's f32 rows, rounded to the operand type as they are staged. At the end
// of a branch the warps' parts meet in local memory and merge by log-sum-exp in a fixed order.
//
// Defines: DK, DV (multiples of 16, at most 128), NW (warps: 2 or 4), BK (keys a warp tile: 16
// or 32, dividing the block size), BF16 (0: f16 operands, 1: bf16). Scores are in base 2 (q
// pre-scaled by scale log2(e)); lse is natural.
#include "common/clc.h"
#include "common/clc_mma.h"
#include "nsa_seq.h"

#define KROWB (2 * DK + 16)   // bytes a staged row of k: (DK / 8 + 1) 16-byte units, an odd count,
#define VROWB (2 * DV + 16)   // so ldmatrix's eight rows fall on distinct bank groups
#define WARP_BYTES (BK * (KROWB + VROWB))
#define MERGE_BYTES (NW * 16 * (DV + 2) * 4)
#define LOCAL_BYTES (NW * WARP_BYTES > MERGE_BYTES ? NW * WARP_BYTES : MERGE_BYTES)
#define OTILES (DV / 8)
#define STILES (BK / 8)       // score tiles of 8 keys
#define TPR (2 * NW)          // threads a row in the merge
#define CPT (DV / TPR)        // columns a thread in the merge
#define KSTEPS (DK / 16)
#define NEG (-INFINITY)
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

void warp_sync(void) { asm volatile("bar.warp.sync -1;" ::: "memory"); }

// The fragment products every pass here is made of (g = lane / 4, t = lane % 4 name the lane's
// rows g, g + 8 and columns 2t, 2t + 1 in m16n8k16's layouts):
//   A_FRAGMENTS: the A fragments of 16 rows, STEPS steps of 16 columns, VAL(ROW, COL) each
//     element of the rows IN(ROW) admits and zero elsewhere (f32, rounded to the operand type);
//   MMA_AB: ACC[nn] (NT tiles of 8 columns) += A fragments F times B fragments loaded by
//     ldmatrix, two tiles a load, from BASE + SS * step + NS * nn;
//   MMA_SCORES: ACC[n] (NT tiles of 8 columns) += the A fragments packed from KT steps of
//     accumulator registers S (two tiles of 8 a step, as scores come out of MMA_AB) times B
//     fragments loaded by transposing ldmatrix from BASE + SS * step + NS * n.
#define A_FRAGMENTS(F, STEPS, IN, VAL)                                                  \
  _Pragma("unroll") for (int st = 0; st < (STEPS); ++st)                                 \
    _Pragma("unroll") for (int e = 0; e < 4; ++e) {                                      \
      const int row = g + 8 * (e & 1), col = 16 * st + 8 * (e >> 1) + 2 * t;            \
      float lo_ = 0.0f, hi_ = 0.0f;                                                      \
      if (IN(row)) {                                                                     \
        lo_ = VAL(row, col);                                                             \
        hi_ = VAL(row, col + 1);                                                         \
      }                                                                                  \
      F[st][e] = pack2(lo_, hi_);                                                        \
    }
#define MMA_AB(ACC, F, STEPS, NT, BASE, SS, NS)                                         \
  _Pragma("unroll") for (int st = 0; st < (STEPS); ++st)                                 \
    _Pragma("unroll") for (int nn = 0; nn < (NT); nn += 2) {                             \
      uint b_[4];                                                                        \
      ldsm_x4(b_, (BASE) + (uint)((SS) * st + (NS) * nn));                               \
      mma(ACC[nn], F[st][0], F[st][1], F[st][2], F[st][3], b_[0], b_[1]);                \
      mma(ACC[nn + 1], F[st][0], F[st][1], F[st][2], F[st][3], b_[2], b_[3]);            \
    }
#define MMA_SCORES(ACC, S, KT, NT, BASE, SS, NS)                                        \
  _Pragma("unroll") for (int kst = 0; kst < (KT); ++kst) {                               \
    const uint a0_ = pack2(S[2 * kst][0], S[2 * kst][1]), a1_ = pack2(S[2 * kst][2], S[2 * kst][3]); \
    const uint a2_ = pack2(S[2 * kst + 1][0], S[2 * kst + 1][1]);                        \
    const uint a3_ = pack2(S[2 * kst + 1][2], S[2 * kst + 1][3]);                        \
    _Pragma("unroll") for (int n = 0; n < (NT); n += 2) {                                \
      uint b_[4];                                                                        \
      ldsm_x4_t(b_, (BASE) + (uint)((SS) * kst + (NS) * n));                             \
      mma(ACC[n], a0_, a1_, a2_, a3_, b_[0], b_[1]);                                     \
      mma(ACC[n + 1], a0_, a1_, a2_, a3_, b_[2], b_[3]);                                 \
    }                                                                                    \
  }
// The warps' parts of accumulator ACC (W columns) into local memory md, [NW][16][W].
#define PARTS_TO_LOCAL(ACC, W)                                                                \
  barrier(CLK_LOCAL_MEM_FENCE);                                                               \
  _Pragma("unroll") for (int i = 0; i < (W) / 8; ++i)                                         \
    _Pragma("unroll") for (int e = 0; e < 4; ++e)                                             \
      md[(warp * 16 + g + 8 * (e >> 1)) * (W) + 8 * i + 2 * t + (e & 1)] = ACC[i][e];         \
  barrier(CLK_LOCAL_MEM_FENCE);

// Rows r < n of k (or v) from token row0 + r of kv head h, each W 16-bit words, into local
// address dst (rows RB bytes apart); rows from n on zero-filled. Not committed.
#define COPY_ROWS(DST, SRC, ROW0, N, W, RB)                                                   \
  _Pragma("unroll") for (int x_ = 0; x_ < EJK_CEIL_DIV(BK * (W) / 8, 32); ++x_) {          \
    const int u_ = lane + 32 * x_, r_ = u_ / ((W) / 8), c_ = u_ - r_ * ((W) / 8);           \
    if (u_ < BK * (W) / 8) {                                                                 \
      const bool in_ = r_ < (N);                                                             \
      cp16((DST) + (uint)(r_ * (RB) + 16 * c_),                                              \
           (SRC) + ((size_t)((ROW0) + (in_ ? r_ : 0)) * H + h) * ((W) / 8) + c_, in_ ? 16u : 0u); \
    }                                                                                        \
  }

// Rows r < n of a pool pass's f32 array (pooled row of block c0 + r at token bos + (c0 + r) BS),
// rounded to the operand type, into local address dst; the rest zeros.
void stage_pooled(uint dst, const __global float4* src, int c0, int n, int bos, int BS, int H, int h, int W, int RB,
                  int lane) {
  for (int u = lane; u < BK * (W / 4); u += 32) {
    const int r = u / (W / 4), c = u - r * (W / 4);
    const float4 x = r < n ? src[((size_t)(bos + (c0 + r) * BS) * H + h) * (W / 4) + c] : (float4)(0.0f);
    // dst is a shared-window address (EJK_SMEM), as cp.async and ldmatrix take it.
    asm volatile("st.shared.v2.u32 [%0], {%1, %2};" ::"r"(dst + (uint)(r * RB + 8 * c)), "r"(pack2(x.s0, x.s1)),
                 "r"(pack2(x.s2, x.s3))
                 : "memory");
  }
}

// Rows of 16 heads from th0 on, R of them real; q at a row and column, scaled by qs.
#define HEAD_IN(ROW) ((ROW) < R)
#define Q_AT(ROW, COL) (ejk_load(q16, (size_t)(th0 + (ROW)) * DK + (COL), dtype) * qs)

__kernel __attribute__((reqd_work_group_size(32 * NW, 1, 1))) void nsa_fwd_mma(
    const __global ushort* q16, const __global uint4* k4, const __global uint4* v4, const __global ushort* gc16,
    const __global ushort* gs16, const __global int* bi, const __global int* bc, const __global int* cu,
    const __global float4* kc4, const __global float4* vc4, __global ushort* o16, __global ushort* oc16,
    __global ushort* os16, __global float* lse, int nseq, int H, int G, int S, int BS, float scale, int dtype) {
  __local uint4 smem[LOCAL_BYTES / 16];
  const int tid = get_local_id(0), lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int tok = get_group_id(0), parts = G > 16 ? G / 16 : 1, h = get_group_id(1) / parts,
            part = get_group_id(1) % parts;
  const int R = G > 16 ? 16 : G, HQ = H * G, th0 = tok * HQ + h * G + part * 16;
  int bos, eos;
  locate(cu, nseq, tok, &bos, &eos);
  const int pos = tok - bos;
  const uint base = EJK_SMEM(smem);
  const uint ks = base + (uint)(warp * WARP_BYTES), vs = ks + BK * KROWB;
  // ldmatrix lane offsets (lanes 8i .. 8i + 7 address matrix i's rows): k as stored gives the B
  // fragments of two 8-key score tiles, v transposed those of two 8-column output tiles.
  const uint koff = (uint)((8 * (lane >> 4) + (lane & 7)) * KROWB + 16 * ((lane >> 3) & 1));
  const uint voff = (uint)((8 * ((lane >> 3) & 1) + (lane & 7)) * VROWB + 16 * (lane >> 4));

  // q's A fragments, pre-scaled into base 2 and rounded to the operand type; rows past R zero.
  uint qf[KSTEPS][4];
  const float qs = scale * LOG2E;
  A_FRAGMENTS(qf, KSTEPS, HEAD_IN, Q_AT)

  float first[CPT];  // this thread's merged o_cmp, for the gated output
  for (int branch = 0; branch < 2; ++branch) {
    float o[OTILES][4], m[2] = {NEG, NEG}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < OTILES; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

    // One staged tile of `n` keys (k at ks, v at vs): scores, online softmax, o += p v. The v
    // wait runs between the softmax and p v (WAIT_V), so a copy in flight lands meanwhile.
#define TILE_BODY(N, WAIT_V)                                                                  \
  {                                                                                          \
    float s[STILES][4];                                                                      \
    _Pragma("unroll") for (int nn = 0; nn < STILES; ++nn) s[nn][0] = s[nn][1] = s[nn][2] = s[nn][3] = 0.0f; \
    MMA_AB(s, qf, KSTEPS, STILES, ks + koff, 32, 8 * KROWB)                                  \
    warp_sync();                                                                             \
    float mx[2] = {NEG, NEG};                                                                \
    _Pragma("unroll") for (int nn = 0; nn < STILES; ++nn)                                    \
      _Pragma("unroll") for (int e = 0; e < 4; ++e) {                                        \
        if (8 * nn + 2 * t + (e & 1) >= (N)) s[nn][e] = NEG;                                 \
        mx[e >> 1] = fmax(mx[e >> 1], s[nn][e]);                                             \
      }                                                                                      \
    float alpha[2], sum[2] = {0.0f, 0.0f};                                                   \
    _Pragma("unroll") for (int hh = 0; hh < 2; ++hh) {                                       \
      const float top = fmax(m[hh], max_quad(mx[hh]));                                       \
      alpha[hh] = m[hh] == NEG ? 0.0f : ex2(m[hh] - top);                                    \
      m[hh] = top;                                                                           \
    }                                                                                        \
    _Pragma("unroll") for (int nn = 0; nn < STILES; ++nn)                                    \
      _Pragma("unroll") for (int e = 0; e < 4; ++e) {                                        \
        s[nn][e] = ex2(s[nn][e] - m[e >> 1]);                                                \
        sum[e >> 1] += s[nn][e];                                                             \
      }                                                                                      \
    _Pragma("unroll") for (int hh = 0; hh < 2; ++hh) l[hh] = l[hh] * alpha[hh] + sum[hh];    \
    _Pragma("unroll") for (int n = 0; n < OTILES; ++n) {                                     \
      o[n][0] *= alpha[0];                                                                   \
      o[n][1] *= alpha[0];                                                                   \
      o[n][2] *= alpha[1];                                                                   \
      o[n][3] *= alpha[1];                                                                   \
    }                                                                                        \
    WAIT_V                                                                                   \
    MMA_SCORES(o, s, BK / 16, OTILES, vs + voff, 16 * VROWB, 16)                             \
    warp_sync();                                                                             \
  }

    if (branch == 0) {
      // Compression: pooled blocks 0 .. nc - 1, tiles of BK in turn over the warps.
      const int nc = (pos + 1) / BS;
      for (int c0 = BK * warp; c0 < nc; c0 += BK * NW) {
        const int n = min(BK, nc - c0);
        stage_pooled(ks, kc4, c0, n, bos, BS, H, h, DK, KROWB, lane);
        stage_pooled(vs, vc4, c0, n, bos, BS, H, h, DV, VROWB, lane);
        warp_sync();
        TILE_BODY(n, )
      }
    } else {
      // Selection: the listed blocks i = warp, warp + NW, ..., each in tiles of BK keys; a block
      // is len(i) keys (0 when its entry is -1 or past the token, fewer for the token's own).
      const int cnt = bc[tok * H + h];
      const __global int* list = bi + (size_t)(tok * H + h) * S;
#define BLOCK_LEN(I) ((I) >= cnt || list[(I)] < 0 || list[(I)] * BS > pos ? 0 : min(BS, pos - list[(I)] * BS + 1))
      // The warp's walk: block i, its key j0; the next tile after (i, j0).
      int i = warp, j0 = 0;
      while (i < cnt && BLOCK_LEN(i) == 0) i += NW;
#define ADVANCE(I, J)                                      \
  {                                                        \
    (J) += BK;                                             \
    if ((J) >= BLOCK_LEN(I)) {                             \
      (J) = 0;                                             \
      (I) += NW;                                           \
      while ((I) < cnt && BLOCK_LEN(I) == 0) (I) += NW;    \
    }                                                      \
  }
      if (i < cnt) {
        const int row0 = bos + list[i] * BS + j0, n = min(BK, BLOCK_LEN(i) - j0);
        COPY_ROWS(ks, k4, row0, n, DK, KROWB)
        cp_commit();
        COPY_ROWS(vs, v4, row0, n, DV, VROWB)
        cp_commit();
      }
      while (i < cnt) {
        const int n = min(BK, BLOCK_LEN(i) - j0);
        int ni = i, nj = j0;
        ADVANCE(ni, nj)
        CP_WAIT(1);  // this tile's k (its v may still travel)
        warp_sync();
        // After q k^T (and its warp_sync) k's buffer is free: the next tile's k goes in.
#define WAIT_AND_NEXT_K                                                                \
  if (ni < cnt) {                                                                      \
    const int nrow0 = bos + list[ni] * BS + nj, nn_ = min(BK, BLOCK_LEN(ni) - nj);     \
    COPY_ROWS(ks, k4, nrow0, nn_, DK, KROWB)                                           \
  }                                                                                    \
  cp_commit();                                                                         \
  CP_WAIT(1);                                                                          \
  warp_sync();
        TILE_BODY(n, WAIT_AND_NEXT_K)
        if (ni < cnt) {
          const int nrow0 = bos + list[ni] * BS + nj, nn_ = min(BK, BLOCK_LEN(ni) - nj);
          COPY_ROWS(vs, v4, nrow0, nn_, DV, VROWB)
        }
        cp_commit();
        i = ni;
        j0 = nj;
      }
      CP_WAIT(0);
#undef WAIT_AND_NEXT_K
#undef ADVANCE
#undef BLOCK_LEN
    }
#undef TILE_BODY

    // The warps' parts meet in local memory (over the tiles: every warp is past its last one).
    barrier(CLK_LOCAL_MEM_FENCE);
    __local float* mo = (__local float*)smem;        // [NW][16][DV]
    __local float* ml = mo + NW * 16 * DV;            // [NW][16][2]: max, sum
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int row = g + 8 * hh;
      const float total = sum_quad(l[hh]);
#pragma unroll
      for (int n = 0; n < OTILES; ++n) {
        mo[(warp * 16 + row) * DV + 8 * n + 2 * t] = o[n][2 * hh];
        mo[(warp * 16 + row) * DV + 8 * n + 2 * t + 1] = o[n][2 * hh + 1];
      }
      if (t == 0) {
        ml[(warp * 16 + row) * 2] = m[hh];
        ml[(warp * 16 + row) * 2 + 1] = total;
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    // TPR threads a row, CPT columns each, the warps' parts in warp order.
    {
      const int row = tid / TPR, c0 = (tid % TPR) * CPT;
      float top = NEG;
      for (int w = 0; w < NW; ++w) top = fmax(top, ml[(w * 16 + row) * 2]);
      float wt[NW], L = 0.0f;
      for (int w = 0; w < NW; ++w) {
        const float mw = ml[(w * 16 + row) * 2];
        wt[w] = mw == NEG ? 0.0f : ex2(mw - top);
        L += wt[w] * ml[(w * 16 + row) * 2 + 1];
      }
      const float inv = L > 0.0f ? 1.0f / L : 0.0f;
      if (row < R) {
        const size_t at = (size_t)(th0 + row) * DV + c0;
        for (int c = 0; c < CPT; ++c) {
          float x = 0.0f;
          for (int w = 0; w < NW; ++w) x += wt[w] * mo[(w * 16 + row) * DV + c0 + c];
          x *= inv;
          if (branch == 0) {
            ejk_store(oc16, at + c, dtype, x);
            first[c] = x;
          } else {
            ejk_store(os16, at + c, dtype, x);
            ejk_store(o16, at + c, dtype,
                      ejk_load(gc16, th0 + row, dtype) * first[c] + ejk_load(gs16, th0 + row, dtype) * x);
          }
        }
        if (tid % TPR == 0) lse[(size_t)(th0 + row) * 2 + branch] = L > 0.0f ? (top + log2(L)) * LN2 : NEG;
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // the merge is read before the next branch's tiles overwrite it
  }
}

// The backward's dq pass on tensor cores: nsa.cl's nsa_bwd_dq contract (dg of both branches, the
// rows' delta terms for the key passes, dq) with the same 16-row fragments and key walk as the
// forward. Per staged tile: S = q k^T and dP = do_b v^T (v as stored gives dP's B fragments as k
// gives S's), P = exp(S - lse) from the forward's lse, dS = P (dP - delta), dq += dS k (k
// transposed by ldmatrix as v is in the forward). The warps' dq parts meet in local memory and
// are summed in warp order. Tiles are staged synchronously: the pass is a fifth of the work of
// the backward's passes, and its loads are the forward's.
#define DQ_MERGE_BYTES (NW * 16 * DK * 4)
#define DQ_LOCAL_BYTES (NW * WARP_BYTES > DQ_MERGE_BYTES ? NW * WARP_BYTES : DQ_MERGE_BYTES)
#define DTILES (DK / 8)
#define VSTEPS (DV / 16)

__kernel __attribute__((reqd_work_group_size(32 * NW, 1, 1))) void nsa_bwd_dq_mma(
    const __global ushort* q16, const __global uint4* k4, const __global uint4* v4, const __global ushort* gc16,
    const __global ushort* gs16, const __global int* bi, const __global int* bc, const __global int* cu,
    const __global float4* kc4, const __global float4* vc4, const __global ushort* oc16, const __global ushort* os16,
    const __global float* lse, const __global ushort* do16, __global ushort* dq16, __global ushort* dgc16,
    __global ushort* dgs16, __global float* delta, int nseq, int H, int G, int S, int BS, float scale, int dtype) {
  __local uint4 smem[DQ_LOCAL_BYTES / 16];
  __local float rows_l[2][16], rows_d[2][16];  // per branch and row: lse in base 2, delta
  const int tid = get_local_id(0), lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int tok = get_group_id(0), parts = G > 16 ? G / 16 : 1, h = get_group_id(1) / parts,
            part = get_group_id(1) % parts;
  const int R = G > 16 ? 16 : G, HQ = H * G, th0 = tok * HQ + h * G + part * 16;
  int bos, eos;
  locate(cu, nseq, tok, &bos, &eos);
  const int pos = tok - bos;
  const uint base = EJK_SMEM(smem);
  const uint ks = base + (uint)(warp * WARP_BYTES), vs = ks + BK * KROWB;
  // ldmatrix lane offsets: k and v as stored give the B fragments of S and dP (two 8-key tiles),
  // k transposed those of dq (two 8-column tiles).
  const uint koff = (uint)((8 * (lane >> 4) + (lane & 7)) * KROWB + 16 * ((lane >> 3) & 1));
  const uint voff = (uint)((8 * (lane >> 4) + (lane & 7)) * VROWB + 16 * ((lane >> 3) & 1));
  const uint kofft = (uint)((8 * ((lane >> 3) & 1) + (lane & 7)) * KROWB + 16 * (lane >> 4));

  // The rows' terms: D = do . o_b is dg_b, delta = g_b D; one work-item a (row, branch).
  for (int e = tid; e < 32; e += 32 * NW) {
    const int row = e >> 1, branch = e & 1;
    float D = 0.0f, lb = 0.0f;
    if (row < R) {
      const __global ushort* ob16 = branch == 0 ? oc16 : os16;
      for (int d = 0; d < DV; ++d)
        D += ejk_load(do16, (size_t)(th0 + row) * DV + d, dtype) * ejk_load(ob16, (size_t)(th0 + row) * DV + d, dtype);
      ejk_store(branch == 0 ? dgc16 : dgs16, th0 + row, dtype, D);
      D *= ejk_load(branch == 0 ? gc16 : gs16, th0 + row, dtype);
      delta[(size_t)(th0 + row) * 2 + branch] = D;
      lb = lse[(size_t)(th0 + row) * 2 + branch] * LOG2E;
    }
    rows_d[branch][row] = D;
    rows_l[branch][row] = lb;  // rows past R: q and do are zero rows, so dS is 0 whatever P is
  }

  // q's A fragments, pre-scaled into base 2; rows past R zero.
  uint qf[KSTEPS][4];
  const float qs = scale * LOG2E;
  A_FRAGMENTS(qf, KSTEPS, HEAD_IN, Q_AT)
  barrier(CLK_LOCAL_MEM_FENCE);

  float dqa[DTILES][4];
#pragma unroll
  for (int n = 0; n < DTILES; ++n) dqa[n][0] = dqa[n][1] = dqa[n][2] = dqa[n][3] = 0.0f;
  for (int branch = 0; branch < 2; ++branch) {
    // do_b = g_b do as A fragments, and this thread's rows' terms.
    uint dof[VSTEPS][4];
    const __global ushort* gb16 = branch == 0 ? gc16 : gs16;
    const float gate[2] = {g < R ? ejk_load(gb16, th0 + g, dtype) : 0.0f, g + 8 < R ? ejk_load(gb16, th0 + g + 8, dtype) : 0.0f};
#define DO_AT(ROW, COL) (ejk_load(do16, (size_t)(th0 + (ROW)) * DV + (COL), dtype) * gate[((ROW) - g) / 8])
    A_FRAGMENTS(dof, VSTEPS, HEAD_IN, DO_AT)
#undef DO_AT
    const float l2[2] = {rows_l[branch][g], rows_l[branch][g + 8]};
    const float dl[2] = {rows_d[branch][g], rows_d[branch][g + 8]};

    // One staged tile of `n` keys: dS in the score registers, then dq += dS k.
#define DQ_TILE(N)                                                                            \
  {                                                                                          \
    float s[STILES][4], dp[STILES][4];                                                       \
    _Pragma("unroll") for (int nn = 0; nn < STILES; ++nn) {                                  \
      s[nn][0] = s[nn][1] = s[nn][2] = s[nn][3] = 0.0f;                                      \
      dp[nn][0] = dp[nn][1] = dp[nn][2] = dp[nn][3] = 0.0f;                                  \
    }                                                                                        \
    MMA_AB(s, qf, KSTEPS, STILES, ks + koff, 32, 8 * KROWB)                                  \
    MMA_AB(dp, dof, VSTEPS, STILES, vs + voff, 32, 8 * VROWB)                                \
    _Pragma("unroll") for (int nn = 0; nn < STILES; ++nn)                                    \
      _Pragma("unroll") for (int e = 0; e < 4; ++e) {                                        \
        const float p = 8 * nn + 2 * t + (e & 1) < (N) ? ex2(s[nn][e] - l2[e >> 1]) : 0.0f;  \
        s[nn][e] = p * (dp[nn][e] - dl[e >> 1]);                                             \
      }                                                                                      \
    MMA_SCORES(dqa, s, BK / 16, DTILES, ks + kofft, 16 * KROWB, 16)                          \
    warp_sync();                                                                             \
  }

    if (branch == 0) {
      const int nc = (pos + 1) / BS;
      for (int c0 = BK * warp; c0 < nc; c0 += BK * NW) {
        const int n = min(BK, nc - c0);
        stage_pooled(ks, kc4, c0, n, bos, BS, H, h, DK, KROWB, lane);
        stage_pooled(vs, vc4, c0, n, bos, BS, H, h, DV, VROWB, lane);
        warp_sync();
        DQ_TILE(n)
      }
    } else {
      const int cnt = bc[tok * H + h];
      const __global int* list = bi + (size_t)(tok * H + h) * S;
      for (int i = warp; i < cnt; i += NW) {
        const int len = list[i] < 0 || list[i] * BS > pos ? 0 : min(BS, pos - list[i] * BS + 1);
        for (int j0 = 0; j0 < len; j0 += BK) {
          const int row0 = bos + list[i] * BS + j0, n = min(BK, len - j0);
          COPY_ROWS(ks, k4, row0, n, DK, KROWB)
          COPY_ROWS(vs, v4, row0, n, DV, VROWB)
          cp_commit();
          CP_WAIT(0);
          warp_sync();
          DQ_TILE(n)
        }
      }
    }
#undef DQ_TILE
  }

  // The warps' dq parts, summed in warp order.
  __local float* md = (__local float*)smem;  // [NW][16][DK]
  PARTS_TO_LOCAL(dqa, DK)
  for (int e = tid; e < R * DK; e += 32 * NW) {
    float x = 0.0f;
    for (int w = 0; w < NW; ++w) x += md[w * 16 * DK + e];
    ejk_store(dq16, (size_t)th0 * DK + e, dtype, scale * x);
  }
}

// The backward's key-side passes on tensor cores, keys (or pooled rows) the 16 rows of every
// fragment. Their k and v stay in registers as A fragments; for each query the warp stages its
// 16 heads' q and do rows by cp.async (rows padded as the forward's k and v) and computes
//   S^T = k q^T, dP^T = v do^T (q and do as stored give the B fragments, as k does in the
//   forward), P = f exp(S - lse), dS = P (g dP - delta),
//   dk += dS^T q, dv += (g P)^T do (q and do transposed by ldmatrix, as v is in the forward),
// g the branch's gate of each head and f how often the query takes the rows. The warps take the
// queries in turn; their parts meet in local memory, summed in warp order.
#define ROWS_LOCAL_BYTES (NW * 16 * (KROWB + VROWB) > NW * 16 * (DK > DV ? DK : DV) * 4 \
                              ? NW * 16 * (KROWB + VROWB)                             \
                              : NW * 16 * (DK > DV ? DK : DV) * 4)

// Rows th0 .. th0 + 15 (R of them real; the rest zeros) of a W-wide array into local address
// DST, rows RB bytes apart, by cp.async (not committed).
#define STAGE_HEADS(DST, SRC, W, RB)                                                          \
  for (int x = lane; x < 16 * ((W) / 8); x += 32) {                                           \
    const int r = x / ((W) / 8), c = x - r * ((W) / 8);                                       \
    const bool in = r < R;                                                                    \
    cp16((DST) + (uint)(r * (RB) + 16 * c), (SRC) + (size_t)(th0 + (in ? r : 0)) * ((W) / 8) + c, in ? 16u : 0u); \
  }

// One query's 16 heads from row th0 on (R of them real) against the rows: SEEN(ROW) says whether
// the query sees fragment row ROW, F is how often it counts, BRANCH picks lse and delta (0
// compression, 1 selection) and GATE the gate.
#define ROWS_QUERY(SEEN, F, BRANCH, GATE)                                                      \
  {                                                                                           \
    STAGE_HEADS(qsh, q4, DK, KROWB)                                                           \
    STAGE_HEADS(dsh, do4, DV, VROWB)                                                          \
    cp_commit();                                                                              \
    /* Each thread's four heads (columns 8 nn + 2 t + c): lse in base 2, delta, gate. */      \
    float l2[2][2], dl[2][2], gt[2][2];                                                       \
    _Pragma("unroll") for (int nn = 0; nn < 2; ++nn)                                          \
      _Pragma("unroll") for (int c = 0; c < 2; ++c) {                                         \
        const int hd = 8 * nn + 2 * t + c;                                                    \
        const bool in = hd < R;                                                               \
        l2[nn][c] = in ? lse[(size_t)(th0 + hd) * 2 + (BRANCH)] * LOG2E : 0.0f;               \
        dl[nn][c] = in ? delta[(size_t)(th0 + hd) * 2 + (BRANCH)] : 0.0f;                     \
        gt[nn][c] = in ? ejk_load(GATE, th0 + hd, dtype) : 0.0f;                              \
      }                                                                                       \
    CP_WAIT(0);                                                                               \
    warp_sync();                                                                              \
    float s[2][4], dp[2][4];                                                                  \
    _Pragma("unroll") for (int nn = 0; nn < 2; ++nn) {                                        \
      s[nn][0] = s[nn][1] = s[nn][2] = s[nn][3] = 0.0f;                                       \
      dp[nn][0] = dp[nn][1] = dp[nn][2] = dp[nn][3] = 0.0f;                                   \
    }                                                                                         \
    MMA_AB(s, kf, KSTEPS, 2, qsh + qoff, 32, 0)                                               \
    MMA_AB(dp, vf, VSTEPS, 2, dsh + doff, 32, 0)                                              \
    /* s becomes dS^T, dp (g P)^T: rows are the key rows (g, g + 8), columns heads. */        \
    _Pragma("unroll") for (int nn = 0; nn < 2; ++nn)                                          \
      _Pragma("unroll") for (int e = 0; e < 4; ++e) {                                         \
        const int c = e & 1;                                                                  \
        const float p = SEEN(g + 8 * (e >> 1)) && 8 * nn + 2 * t + c < R ? (F) * ex2(s[nn][e] - l2[nn][c]) : 0.0f; \
        s[nn][e] = p * (gt[nn][c] * dp[nn][e] - dl[nn][c]);                                   \
        dp[nn][e] = p * gt[nn][c];                                                            \
      }                                                                                       \
    MMA_SCORES(dka, s, 1, DTILES, qsh + qofft, 0, 16)                                         \
    MMA_SCORES(dva, dp, 1, OTILES, dsh + dofft, 0, 16)                                        \
    warp_sync(); /* the staged rows are read before the next query's copies */                \
  }

// What both passes set up: lane roles, the warp's staging rows and ldmatrix offsets (q and do as
// stored for S and dP, transposed for dk and dv), the accumulators.
#define ROWS_SETUP                                                                            \
  __local uint4 smem[ROWS_LOCAL_BYTES / 16];                                                  \
  const int tid = get_local_id(0), lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3; \
  const int HQ = H * G, R = G > 16 ? 16 : G;                                                  \
  const uint qsh = EJK_SMEM(smem) + (uint)(warp * 16 * (KROWB + VROWB)), dsh = qsh + 16 * KROWB; \
  const uint qoff = (uint)((8 * (lane >> 4) + (lane & 7)) * KROWB + 16 * ((lane >> 3) & 1));  \
  const uint doff = (uint)((8 * (lane >> 4) + (lane & 7)) * VROWB + 16 * ((lane >> 3) & 1));  \
  const uint qofft = (uint)((8 * ((lane >> 3) & 1) + (lane & 7)) * KROWB + 16 * (lane >> 4)); \
  const uint dofft = (uint)((8 * ((lane >> 3) & 1) + (lane & 7)) * VROWB + 16 * (lane >> 4)); \
  const float ks2 = scale * LOG2E;                                                            \
  uint kf[KSTEPS][4], vf[VSTEPS][4];                                                          \
  float dka[DTILES][4], dva[OTILES][4];                                                       \
  _Pragma("unroll") for (int i = 0; i < DTILES; ++i) dka[i][0] = dka[i][1] = dka[i][2] = dka[i][3] = 0.0f; \
  _Pragma("unroll") for (int i = 0; i < OTILES; ++i) dva[i][0] = dva[i][1] = dva[i][2] = dva[i][3] = 0.0f; \
  __local float* md = (__local float*)smem; /* the parts as they meet: [NW][16][DK or DV] */

// nsa.cl's nsa_bwd_dkv contract (the gradients of a tile's keys from every query whose selection
// lists its block, as often as it lists it, plus the pooled gradient's share) for tiles of 16
// keys; the warps take the bitmap's queries in turn.
__kernel __attribute__((reqd_work_group_size(32 * NW, 1, 1))) void nsa_bwd_dkv_mma(
    const __global uint4* q4, const __global ushort* k16, const __global ushort* v16, const __global ushort* gs16,
    const __global int* bi, const __global int* bc, const __global int* cu, const __global float* lse,
    const __global uint4* do4, const __global float* delta, const __global float* dkc, const __global float* dvc,
    const __global uint* sel, __global ushort* dk16, __global ushort* dv16, int nseq, int H, int G, int S, int BS,
    int W, float scale, int dtype) {
  const int j0 = get_group_id(0), h = get_group_id(1);
  int bos, eos;
  const int seq = locate(cu, nseq, j0, &bos, &eos);
  const int off = (j0 - bos) % BS, b = (j0 - bos) / BS, block0 = j0 - off;
  if (off % 16 != 0) return;  // the whole group: no tile starts here
  ROWS_SETUP
  const int n = min(16, min(block0 + BS, eos) - j0);
  // The tile's k (pre-scaled into base 2) and v as A fragments; keys past n zero rows.
#define KEY_IN(ROW) ((ROW) < n)
#define K_AT(ROW, COL) (ks2 * ejk_load(k16, ((size_t)(j0 + (ROW)) * H + h) * DK + (COL), dtype))
#define V_AT(ROW, COL) ejk_load(v16, ((size_t)(j0 + (ROW)) * H + h) * DV + (COL), dtype)
  A_FRAGMENTS(kf, KSTEPS, KEY_IN, K_AT)
  A_FRAGMENTS(vf, VSTEPS, KEY_IN, V_AT)
#undef KEY_IN
#undef K_AT
#undef V_AT

  // The queries from j0 on that list the block, in token order (nsa_bwd_mark's bitmap).
  const __global uint* bits = sel + ((size_t)(block0 / BS + seq) * H + h) * W;
  const int w0 = (j0 - block0) / 32, w_end = n > 0 ? (eos - block0 + 31) / 32 : 0;
  int turn = 0;
  for (int w = w0; w < w_end; ++w) {
    for (uint word = bits[w] & (w == w0 ? ~0u << ((j0 - block0) % 32) : ~0u); word != 0u; word &= word - 1u) {
      if (turn++ % NW != warp) continue;
      const int tq = block0 + 32 * w + (int)popcount((word & (0u - word)) - 1u);
      const int cnt = bc[tq * H + h];
      int times = 0;
      for (int i = 0; i < cnt; ++i) times += bi[(tq * H + h) * S + i] == b;
      const int rows = min(n, tq - j0 + 1);  // keys the query sees
#define SEEN_KEY(ROW) ((ROW) < rows)
      for (int g0 = 0; times > 0 && g0 < G; g0 += 16) {
        const int th0 = tq * HQ + h * G + g0;
        ROWS_QUERY(SEEN_KEY, (float)times, 1, gs16)
      }
#undef SEEN_KEY
    }
  }

  // dk then dv through the same local memory, plus the pooled gradient's share (its block's
  // tokens' shares from nsa_bwd_dcmp, summed in order): one work-item a column.
  const bool pooled = block0 + BS <= eos;
  const float inv = 1.0f / (float)BS;
  PARTS_TO_LOCAL(dka, DK)
  for (int d = tid; d < DK; d += 32 * NW) {
    float share = 0.0f;
    for (int r = 0; pooled && r < BS; ++r) share += dkc[((size_t)(block0 + r) * H + h) * DK + d];
    for (int row = 0; row < n; ++row) {
      float x = 0.0f;
      for (int w2 = 0; w2 < NW; ++w2) x += md[(w2 * 16 + row) * DK + d];
      ejk_store(dk16, ((size_t)(j0 + row) * H + h) * DK + d, dtype, scale * x + inv * share);
    }
  }
  PARTS_TO_LOCAL(dva, DV)
  for (int d = tid; d < DV; d += 32 * NW) {
    float share = 0.0f;
    for (int r = 0; pooled && r < BS; ++r) share += dvc[((size_t)(block0 + r) * H + h) * DV + d];
    for (int row = 0; row < n; ++row) {
      float x = 0.0f;
      for (int w2 = 0; w2 < NW; ++w2) x += md[(w2 * 16 + row) * DV + d];
      ejk_store(dv16, ((size_t)(j0 + row) * H + h) * DV + d, dtype, x + inv * share);
    }
  }
}

// nsa.cl's nsa_bwd_dcmp contract (each token of a whole block holds a share of the block's
// pooled key and value gradients, summed by the key pass) for 16 blocks at a time, their pooled
// rows the fragments' rows. The group at offset o of the first block of a tile of 16 (block index
// a multiple of 16) takes the queries at offset o of each BS from that block's last token on
// (the warps in turn), each block seen from its last token on, and writes the shares at offset o
// of the tile's whole blocks.
__kernel __attribute__((reqd_work_group_size(32 * NW, 1, 1))) void nsa_bwd_dcmp_mma(
    const __global uint4* q4, const __global ushort* gc16, const __global int* cu, const __global float* kc,
    const __global float* vc, const __global float* lse, const __global uint4* do4, const __global float* delta,
    __global float* dkc, __global float* dvc, int nseq, int H, int G, int BS, float scale, int dtype) {
  const int t0 = get_group_id(0), h = get_group_id(1);
  int bos, eos;
  locate(cu, nseq, t0, &bos, &eos);
  const int o = (t0 - bos) % BS, c0 = (t0 - bos) / BS, len = eos - bos;
  if (c0 % 16 != 0) return;  // the whole group: not the first block of a tile
  ROWS_SETUP
  const int nb = min(16, len / BS - c0);  // whole blocks of the tile (none: no query, no store)
  // The tile's pooled rows (k pre-scaled into base 2) as A fragments; blocks past nb zero rows.
#define BLOCK_IN(ROW) ((ROW) < nb)
#define K_AT(ROW, COL) (ks2 * kc[((size_t)(bos + (c0 + (ROW)) * BS) * H + h) * DK + (COL)])
#define V_AT(ROW, COL) vc[((size_t)(bos + (c0 + (ROW)) * BS) * H + h) * DV + (COL)]
  A_FRAGMENTS(kf, KSTEPS, BLOCK_IN, K_AT)
  A_FRAGMENTS(vf, VSTEPS, BLOCK_IN, V_AT)
#undef BLOCK_IN
#undef K_AT
#undef V_AT

  const int first = nb > 0 ? c0 * BS + BS - 1 + o : len;
  for (int pos = first + warp * BS; pos < len; pos += NW * BS) {
#define SEEN_BLOCK(ROW) ((ROW) < nb && (c0 + (ROW)) * BS + BS - 1 <= pos)
    for (int g0 = 0; g0 < G; g0 += 16) {
      const int th0 = (bos + pos) * HQ + h * G + g0;
      ROWS_QUERY(SEEN_BLOCK, 1.0f, 0, gc16)
    }
#undef SEEN_BLOCK
  }

  // dk then dv through the same local memory, stored at offset o of each whole block.
  PARTS_TO_LOCAL(dka, DK)
  for (int e = tid; e < nb * DK; e += 32 * NW) {
    const int row = e / DK, d = e - row * DK;
    float x = 0.0f;
    for (int w2 = 0; w2 < NW; ++w2) x += md[(w2 * 16 + row) * DK + d];
    dkc[((size_t)(bos + (c0 + row) * BS + o) * H + h) * DK + d] = scale * x;
  }
  PARTS_TO_LOCAL(dva, DV)
  for (int e = tid; e < nb * DV; e += 32 * NW) {
    const int row = e / DV, d = e - row * DV;
    float x = 0.0f;
    for (int w2 = 0; w2 < NW; ++w2) x += md[(w2 * 16 + row) * DV + d];
    dvc[((size_t)(bos + (c0 + row) * BS + o) * H + h) * DV + d] = x;
  }
}
