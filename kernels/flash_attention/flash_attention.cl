// flash_attention and flash_attention_bwd on OpenCL: the scalar tiled design of
// flash_attention.glsl in OpenCL C 1.2. One program per tile geometry holds all five passes:
// fa_fwd, then for the backward fa_prep, fa_dkdv, fa_dq and fa_finish. Semantics:
// flash_attention.hpp. Accumulation is f32 throughout; logits are kept in base 2 (z * log2 e,
// with log2 e folded into the query scale) so every exponential is an exp2.
//
// Defines (geometry only; everything else is a kernel argument, so one program serves every
// option, dtype and head_dim of a size class):
//   BQ  query rows of a block         BK  keys of a block
//   RX RY  workgroup shape (RX x RY)  DMAX  head_dim rounded up to a size class (32 .. 256)
//   FMA  1: fma() runs in hardware, 0: mad()
//   UNROLL_LOOPS  1: unroll the loops over a work-item's register tiles, so that GPU compilers
//          keep the tiles in registers; 0 (CPU drivers): leave it to the compiler, which builds
//          the program much faster
//
// Tiling. A workgroup of RX x RY work-items owns a block of BQ queries (forward, dq) or BK keys
// (dk/dv) of one sequence and head. Score tiles [BQ][BK] are spread so that work-item (x, y)
// holds rows y + i*RY and columns x + j*RX in registers; output tiles [rows][head_dim] likewise
// hold columns x + j*RX. Operand rows are staged in local memory as f32 with an odd row stride,
// so work-items that read different rows hit different banks. Local memory is a __local
// argument sized by the host for the pass, so a geometry whose backward does not fit still
// builds and runs its forward. Nothing is atomic: every result is deterministic.
//
// Storage: q, k, v, out, dout, dq, dk, dv, bias, softmax_aux and their gradients are f32, f16
// or bf16 (common/clc.h), chosen at run time by Params.dtype / Params.dtypes; the buffers
// are declared float and reinterpreted.
#include "flash_attention_common.cl"

#define NT (RX * RY)
#define WQ (BQ / RY)               // score / output rows per work-item
#define WK (BK / RX)               // score columns per work-item
// dk/dv rows per work-item; a forward geometry may have none (its program still declares fa_dkdv).
#define WR (BK / RY > 0 ? BK / RY : 1)
#define WD EJK_CEIL_DIV(DMAX, RX)  // output columns per work-item (some past head_dim)
#define DS (WD * RX + 1)           // local row stride of staged operands (odd)
#define KS (BK + 1)                // local row stride of score tiles
#define PREP_NT 64                 // work-items of the prep and finish passes
#define PREP_LANES 16              // work-items of the prep pass a row

#if UNROLL_LOOPS
#define UNROLL _Pragma("unroll")
#else
#define UNROLL
#endif

#if FMA
#define MAC(a, b, c) fma(a, b, c)
#else
#define MAC(a, b, c) mad(a, b, c)
#endif

// ---- staging -------------------------------------------------------------------------------

// rows [0, n) of sh at `base` (stride DS) = tokens tok0.. of head h of src (nh heads) * scale;
// rows from `valid` on and columns from D on are zero: output tiles read every column a
// work-item holds (WD * RX of them, some past head_dim), and none of it may be uninitialised.
// Every work-item of the group takes part.
void stage(__local float* sh, uint base, uint n, int tok0, int valid, uint nh, uint h, __global const float* src,
           uint dt, uint D, float scale, uint tid, uint nt) {
  // Row and column advance by nt elements per step, without a division per element.
  const uint W = WD * RX, rstep = nt / W, dstep = nt - rstep * W;
  uint r = tid / W, d = tid - r * W;
  while (r < n) {
    float x = 0.0f;
    if ((int)r < valid && d < D) x = ejk_load(src, ((uint)(tok0 + (int)r) * nh + h) * D + d, dt) * scale;
    sh[base + r * DS + d] = x;
    r += rstep;
    d += dstep;
    if (d >= W) {
      d -= W;
      ++r;
    }
  }
}

// tile[i][j] = sh[a + (ty + i RY) row] . sh[b + (tx + j RX) row] over D.
void dots(__local const float* sh, uint a, uint b, uint D, const Ctx* c, float tile[WQ][WK]) {
  UNROLL
  for (uint i = 0; i < WQ; ++i)
    for (uint j = 0; j < WK; ++j) tile[i][j] = 0.0f;
  const uint a0 = a + c->ty * DS, b0 = b + c->tx * DS;
  for (uint d = 0; d < D; ++d) {
    float x[WQ], y[WK];
    UNROLL
    for (uint i = 0; i < WQ; ++i) x[i] = sh[a0 + i * RY * DS + d];
    UNROLL
    for (uint j = 0; j < WK; ++j) y[j] = sh[b0 + j * RX * DS + d];
    UNROLL
    for (uint i = 0; i < WQ; ++i)
      for (uint j = 0; j < WK; ++j) tile[i][j] = MAC(x[i], y[j], tile[i][j]);
  }
}

// ---- forward -------------------------------------------------------------------------------
// Local memory: BQ*DS (q) + BK*DS (k, then v) + BQ*KS (P) + BQ*RX (row partials) floats.

__kernel __attribute__((reqd_work_group_size(RX, RY, 1))) void fa_fwd(FWD_ARGS) {
  EJK_LOCAL_BIND(float, sh)
  const Params* pc = &P;
  const uint qb = get_group_id(0), head = get_group_id(1);
  const Ctx cx = make_ctx(pc, get_group_id(2), cu_q, cu_k);
  const Ctx* c = &cx;
  const uint tx = c->tx, ty = c->ty, D = pc->head_dim, DT = pc->dtype;
  // Packed input: a block past its sequence's end (shorter than max_seqlen_q) has no rows; it
  // runs no key block and writes nothing. It does not return early: PoCL miscompiles a return
  // ahead of a barrier.
  const int i0 = (int)(qb * BQ);
  const int rows = clamp(c->q_len - i0, 0, (int)BQ);
  const uint hk = head / pc->group;
  const uint QS = 0, KV = BQ * DS, PS = KV + BK * DS, RED = PS + BQ * KS;

  float m[WQ], l[WQ], acc[WQ][WD], tile[WQ][WK];
  const float sink = HAS(F_SINKS) ? ejk_load(sinks, head, SINKS_DT) * LOG2E : NEG;
  UNROLL
  for (uint i = 0; i < WQ; ++i) {
    // A sink joins the denominator as one more logit whose weight starts the running sum;
    // each work-item sums its own columns, so only column 0's holder starts at 1.
    m[i] = sink;
    l[i] = HAS(F_SINKS) && tx == 0u ? 1.0f : 0.0f;
    UNROLL
    for (uint j = 0; j < WD; ++j) acc[i][j] = 0.0f;
  }
  stage(sh, QS, BQ, c->q_start + i0, rows, pc->heads, head, q, DT, D, pc->qscale, c->tid, NT);

  const int jlo = max(0, key_lo(pc, c, i0)), jhi = min(c->k_len - 1, key_hi(pc, c, i0 + rows - 1));
  Walk tiles = KEY_TILES(head, i0, jlo / (int)BK, rows > 0 && jlo <= jhi ? jhi / (int)BK : -1, BK);
  for (int kb = walk_next(&tiles); kb >= 0; kb = walk_next(&tiles)) {
    const int j0 = kb * (int)BK, n = min((int)BK, c->k_len - j0);
    barrier(CLK_LOCAL_MEM_FENCE);
    stage(sh, KV, BK, c->k_start + j0, n, pc->kv_heads, hk, k, DT, D, 1.0f, c->tid, NT);
    barrier(CLK_LOCAL_MEM_FENCE);
    dots(sh, QS, KV, D, c, tile);
    UNROLL
    for (uint i = 0; i < WQ; ++i) {
      const int r = (int)(ty + i * RY);
      float mx = NEG;
      UNROLL
      for (uint j = 0; j < WK; ++j) {
        tile[i][j] = logit(pc, c, tile[i][j], head, i0 + r, j0 + (int)(tx + j * RX), bias, q_seg, k_seg);
        mx = max(mx, tile[i][j]);
      }
      sh[RED + (uint)r * RX + tx] = mx;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    stage(sh, KV, BK, c->k_start + j0, n, pc->kv_heads, hk, v, DT, D, 1.0f, c->tid, NT);
    UNROLL
    for (uint i = 0; i < WQ; ++i) {
      const uint r = ty + i * RY;
      float mx = m[i];
      for (uint x = 0; x < RX; ++x) mx = max(mx, sh[RED + r * RX + x]);
      float alpha = 1.0f;
      if (mx == NEG) {  // nothing allowed in this row yet
        for (uint j = 0; j < WK; ++j) tile[i][j] = 0.0f;
      } else {
        alpha = exp2(m[i] - mx);
        m[i] = mx;
        float s = 0.0f;
        UNROLL
        for (uint j = 0; j < WK; ++j) {
          tile[i][j] = exp2(tile[i][j] - mx);
          s += tile[i][j];
        }
        l[i] = l[i] * alpha + s;
      }
      UNROLL
      for (uint j = 0; j < WK; ++j) {
        float p = tile[i][j];
        if (HAS(F_DROPOUT) && p != 0.0f) p *= keep(pc, c, head, i0 + (int)r, j0 + (int)(tx + j * RX));
        sh[PS + r * KS + tx + j * RX] = p;
      }
      UNROLL
      for (uint j = 0; j < WD; ++j) acc[i][j] *= alpha;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint cc = 0; cc < BK; ++cc) {
      float vv[WD];
      UNROLL
      for (uint j = 0; j < WD; ++j) vv[j] = sh[KV + cc * DS + tx + j * RX];
      UNROLL
      for (uint i = 0; i < WQ; ++i) {
        const float p = sh[PS + (ty + i * RY) * KS + cc];
        UNROLL
        for (uint j = 0; j < WD; ++j) acc[i][j] = MAC(p, vv[j], acc[i][j]);
      }
    }
  }

  // Row sums: each work-item holds its columns' share.
  barrier(CLK_LOCAL_MEM_FENCE);
  UNROLL
  for (uint i = 0; i < WQ; ++i) sh[RED + (ty + i * RY) * RX + tx] = l[i];
  barrier(CLK_LOCAL_MEM_FENCE);
  UNROLL
  for (uint i = 0; i < WQ; ++i) {
    const int r = (int)(ty + i * RY);
    if (r >= rows) continue;
    float s = 0.0f;
    for (uint x = 0; x < RX; ++x) s += sh[RED + (uint)r * RX + x];
    const uint tok = (uint)(c->q_start + i0 + r);
    const float inv = s > 0.0f ? 1.0f / s : 0.0f;
    UNROLL
    for (uint j = 0; j < WD; ++j) {
      const uint d = tx + j * RX;
      if (d < D) ejk_store(out, (tok * pc->heads + head) * D + d, DT, acc[i][j] * inv);
    }
    if (tx == 0u) lse[lse_index(pc, c, head, i0 + r)] = s > 0.0f ? (m[i] + log2(s)) * LN2 : -INFINITY;
  }
}

// ---- backward: delta = dout . out per row, and per-block shares of dsoftmax_aux -------------
// PREP_NT x 1 work-items for PREP_NT query rows. PREP_LANES work-items share a row, each summing
// every PREP_LANES-th column, so that a load reads adjacent elements of a row (one work-item a
// row read 2 bytes of each of 32 rows a load); the row's partial sums are then added in a fixed
// order. Local memory: PREP_NT (PREP_LANES + 1) floats (rows padded to an odd stride).

__kernel __attribute__((reqd_work_group_size(PREP_NT, 1, 1))) void fa_prep(BWD_ARGS) {
  EJK_LOCAL_BIND(float, sh)
  const Params* pc = &P;
  const uint qb = get_group_id(0), head = get_group_id(1);
  const Ctx cx = make_ctx(pc, get_group_id(2), cu_q, cu_k);
  const Ctx* c = &cx;
  const uint tid = c->tid, D = pc->head_dim, DT = pc->dtype;
  const uint lane = tid % PREP_LANES;
  for (uint r = tid / PREP_LANES; r < PREP_NT; r += PREP_NT / PREP_LANES) {
    const int i = (int)(qb * PREP_NT + r);
    float s = 0.0f;
    if (i < c->q_len) {
      const uint base = ((uint)(c->q_start + i) * pc->heads + head) * D;
      for (uint d = lane; d < D; d += PREP_LANES) s = MAC(ejk_load(out, base + d, DT), ejk_load(dout, base + d, DT), s);
    }
    sh[r * (PREP_LANES + 1) + lane] = s;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const int i = (int)(qb * PREP_NT + tid);
  float s = 0.0f;
  for (uint l = 0; l < PREP_LANES; ++l) s += sh[tid * (PREP_LANES + 1) + l];
  float share = 0.0f;
  if (i < c->q_len) {
    const uint tok = (uint)(c->q_start + i);
    delta[head * pc->total_q + tok] = s;
    if (HAS(F_SINKS)) {
      const float x = lse[lse_index(pc, c, head, i)];
      if (!isinf(x)) share = -exp(ejk_load(sinks, head, SINKS_DT) - x) * s;
    }
  }
  // Fixed-order tree: the same sums in the same order on every run.
  barrier(CLK_LOCAL_MEM_FENCE);
  sh[tid] = share;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint w = PREP_NT / 2u; w > 0u; w /= 2u) {
    if (tid < w) sh[tid] += sh[tid + w];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (tid == 0u && HAS(F_SINKS)) part[(c->seq * pc->heads + head) * pc->extra + qb] = sh[0];
}

// ---- backward: dk, dv (and dbias) for one key block of one kv head --------------------------
// Local memory: 2*BK*DS (k, v) + BQ*DS (q or dout) + 2*BQ*KS (P, dU) + 2*BQ (lse, delta) floats.

__kernel __attribute__((reqd_work_group_size(RX, RY, 1))) void fa_dkdv(BWD_ARGS) {
  EJK_LOCAL_BIND(float, sh)
  const Params* pc = &P;
  const uint kb = get_group_id(0), hk = get_group_id(1);
  const Ctx cx = make_ctx(pc, get_group_id(2), cu_q, cu_k);
  const Ctx* c = &cx;
  const uint tx = c->tx, ty = c->ty, tid = c->tid, D = pc->head_dim, DT = pc->dtype;
  // Packed input: a block past its sequence's end has no keys and writes nothing (no early
  // return: see fa_fwd).
  const int j0 = (int)(kb * BK);
  const int n = clamp(c->k_len - j0, 0, (int)BK);
  const uint KSH = 0, VSH = BK * DS, XS = 2 * BK * DS, PD = XS + BQ * DS, DU = PD + BQ * KS, LS = DU + BQ * KS,
             DL = LS + BQ;
  float dkr[WR][WD], dvr[WR][WD], pm[WQ][WK], tile[WQ][WK];
  UNROLL
  for (uint i = 0; i < WR; ++i)
    for (uint j = 0; j < WD; ++j) dkr[i][j] = dvr[i][j] = 0.0f;
  stage(sh, KSH, BK, c->k_start + j0, n, pc->kv_heads, hk, k, DT, D, 1.0f, tid, NT);
  stage(sh, VSH, BK, c->k_start + j0, n, pc->kv_heads, hk, v, DT, D, 1.0f, tid, NT);
  const bool has_dbias = HAS(F_BIAS);
  const bool scratch = HAS(F_DBIAS_SCRATCH);

  for (uint h = hk * pc->group; h < (hk + 1u) * pc->group; ++h) {
    Walk tiles = QUERY_TILES(h, j0, 0, n > 0 && c->q_len > 0 ? (c->q_len - 1) / (int)BQ : -1, BQ);
    for (int qtile = walk_next(&tiles); qtile >= 0; qtile = walk_next(&tiles)) {
      const int i0 = qtile * (int)BQ;
      const int rows = min((int)BQ, c->q_len - i0);
      // dbias entries of blocks no query of which sees these keys are zero.
      if (key_hi(pc, c, i0 + rows - 1) < j0 || key_lo(pc, c, i0) > j0 + n - 1) {
        if (has_dbias)
          for (uint e = tid; e < (uint)(rows * n); e += NT) {
            const int r = (int)e / n, cc = (int)e - r * n;
            const uint at = ((c->seq * pc->heads + h) * pc->seq_q + (uint)(i0 + r)) * pc->seq_k + (uint)(j0 + cc);
            if (scratch)
              dbscr[at] = 0.0f;
            else
              ejk_store(dbias, at, BIAS_DT, 0.0f);
          }
        continue;
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      stage(sh, XS, BQ, c->q_start + i0, rows, pc->heads, h, dout, DT, D, 1.0f, tid, NT);
      for (uint r = tid; r < BQ; r += NT) {
        const bool inr = (int)r < rows;
        sh[LS + r] = inr ? lse[lse_index(pc, c, h, i0 + (int)r)] * LOG2E : 0.0f;
        sh[DL + r] = inr ? delta[h * pc->total_q + (uint)(c->q_start + i0 + (int)r)] : 0.0f;
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      dots(sh, XS, VSH, D, c, tile);  // dP = dout . v
      for (uint i = 0; i < WQ; ++i)
        for (uint j = 0; j < WK; ++j) pm[i][j] = tile[i][j];
      barrier(CLK_LOCAL_MEM_FENCE);
      stage(sh, XS, BQ, c->q_start + i0, rows, pc->heads, h, q, DT, D, pc->qscale, tid, NT);
      barrier(CLK_LOCAL_MEM_FENCE);
      dots(sh, XS, KSH, D, c, tile);
      UNROLL
      for (uint i = 0; i < WQ; ++i) {
        const uint r = ty + i * RY;
        const float lse2 = sh[LS + r], dlt = sh[DL + r];
        UNROLL
        for (uint j = 0; j < WK; ++j) {
          const uint cc = tx + j * RX;
          const int qi = i0 + (int)r, kj = j0 + (int)cc;
          const float z = logit(pc, c, tile[i][j], h, qi, kj, bias, q_seg, k_seg);
          const float p = z == NEG || isinf(lse2) ? 0.0f : exp2(z - lse2);
          float dp = pm[i][j], pd = p;
          if (HAS(F_DROPOUT) && p != 0.0f) {
            const float kp = keep(pc, c, h, qi, kj);
            dp *= kp;
            pd *= kp;
          }
          float du = p * (dp - dlt);
          if (HAS(F_SOFTCAP) && p != 0.0f) {
            const float th = z / pc->cap2;
            du *= 1.0f - th * th;
          }
          sh[PD + r * KS + cc] = pd;
          sh[DU + r * KS + cc] = du;
          if (has_dbias && (int)r < rows && (int)cc < n) {
            const uint at = ((c->seq * pc->heads + h) * pc->seq_q + (uint)qi) * pc->seq_k + (uint)kj;
            if (scratch)
              dbscr[at] = du;
            else
              ejk_store(dbias, at, BIAS_DT, du);
          }
        }
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      // dk += dU^T q (q scaled; grad_scale restores softmax_scale below).
      for (uint r = 0; r < BQ; ++r) {
        float x[WD];
        UNROLL
        for (uint j = 0; j < WD; ++j) x[j] = sh[XS + r * DS + tx + j * RX];
        UNROLL
        for (uint i = 0; i < WR; ++i) {
          const float u = sh[DU + r * KS + ty + i * RY];
          UNROLL
          for (uint j = 0; j < WD; ++j) dkr[i][j] = MAC(u, x[j], dkr[i][j]);
        }
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      stage(sh, XS, BQ, c->q_start + i0, rows, pc->heads, h, dout, DT, D, 1.0f, tid, NT);
      barrier(CLK_LOCAL_MEM_FENCE);
      // dv += Pd^T dout.
      for (uint r = 0; r < BQ; ++r) {
        float x[WD];
        UNROLL
        for (uint j = 0; j < WD; ++j) x[j] = sh[XS + r * DS + tx + j * RX];
        UNROLL
        for (uint i = 0; i < WR; ++i) {
          const float u = sh[PD + r * KS + ty + i * RY];
          UNROLL
          for (uint j = 0; j < WD; ++j) dvr[i][j] = MAC(u, x[j], dvr[i][j]);
        }
      }
    }
  }

  for (uint i = 0; i < WR; ++i) {
    const int cc = (int)(ty + i * RY);
    if (cc >= n) continue;
    const uint base = ((uint)(c->k_start + j0 + cc) * pc->kv_heads + hk) * D;
    UNROLL
    for (uint j = 0; j < WD; ++j) {
      const uint d = tx + j * RX;
      if (d < D) {
        ejk_store(dk, base + d, DT, dkr[i][j] * pc->grad_scale);
        ejk_store(dv, base + d, DT, dvr[i][j]);
      }
    }
  }
}

// ---- backward: dq for one query block of one head -------------------------------------------
// Local memory: 2*BQ*DS (q, dout) + BK*DS (v, then k) + BQ*KS (dU) + 2*BQ (lse, delta) floats.

__kernel __attribute__((reqd_work_group_size(RX, RY, 1))) void fa_dq(BWD_ARGS) {
  EJK_LOCAL_BIND(float, sh)
  const Params* pc = &P;
  const uint qb = get_group_id(0), head = get_group_id(1);
  const Ctx cx = make_ctx(pc, get_group_id(2), cu_q, cu_k);
  const Ctx* c = &cx;
  const uint tx = c->tx, ty = c->ty, tid = c->tid, D = pc->head_dim, DT = pc->dtype;
  // Packed input: a block past its sequence's end has no rows (no early return: see fa_fwd).
  const int i0 = (int)(qb * BQ);
  const int rows = clamp(c->q_len - i0, 0, (int)BQ);
  const uint hk = head / pc->group;
  const uint QS = 0, DO = BQ * DS, YS = 2 * BQ * DS, DU = YS + BK * DS, LS = DU + BQ * KS, DL = LS + BQ;
  float acc[WQ][WD], pm[WQ][WK], tile[WQ][WK];
  UNROLL
  for (uint i = 0; i < WQ; ++i)
    for (uint j = 0; j < WD; ++j) acc[i][j] = 0.0f;
  stage(sh, QS, BQ, c->q_start + i0, rows, pc->heads, head, q, DT, D, pc->qscale, tid, NT);
  stage(sh, DO, BQ, c->q_start + i0, rows, pc->heads, head, dout, DT, D, 1.0f, tid, NT);
  for (uint r = tid; r < BQ; r += NT) {
    const bool inr = (int)r < rows;
    sh[LS + r] = inr ? lse[lse_index(pc, c, head, i0 + (int)r)] * LOG2E : 0.0f;
    sh[DL + r] = inr ? delta[head * pc->total_q + (uint)(c->q_start + i0 + (int)r)] : 0.0f;
  }

  const int jlo = max(0, key_lo(pc, c, i0)), jhi = min(c->k_len - 1, key_hi(pc, c, i0 + rows - 1));
  Walk tiles = KEY_TILES(head, i0, jlo / (int)BK, rows > 0 && jlo <= jhi ? jhi / (int)BK : -1, BK);
  for (int kb = walk_next(&tiles); kb >= 0; kb = walk_next(&tiles)) {
    const int j0 = kb * (int)BK, n = min((int)BK, c->k_len - j0);
    barrier(CLK_LOCAL_MEM_FENCE);
    stage(sh, YS, BK, c->k_start + j0, n, pc->kv_heads, hk, v, DT, D, 1.0f, tid, NT);
    barrier(CLK_LOCAL_MEM_FENCE);
    dots(sh, DO, YS, D, c, tile);  // dP = dout . v
    for (uint i = 0; i < WQ; ++i)
      for (uint j = 0; j < WK; ++j) pm[i][j] = tile[i][j];
    barrier(CLK_LOCAL_MEM_FENCE);
    stage(sh, YS, BK, c->k_start + j0, n, pc->kv_heads, hk, k, DT, D, 1.0f, tid, NT);
    barrier(CLK_LOCAL_MEM_FENCE);
    dots(sh, QS, YS, D, c, tile);
    UNROLL
    for (uint i = 0; i < WQ; ++i) {
      const uint r = ty + i * RY;
      const float lse2 = sh[LS + r], dlt = sh[DL + r];
      UNROLL
      for (uint j = 0; j < WK; ++j) {
        const uint cc = tx + j * RX;
        const int qi = i0 + (int)r, kj = j0 + (int)cc;
        const float z = logit(pc, c, tile[i][j], head, qi, kj, bias, q_seg, k_seg);
        const float p = z == NEG || isinf(lse2) ? 0.0f : exp2(z - lse2);
        float dp = pm[i][j];
        if (HAS(F_DROPOUT) && p != 0.0f) dp *= keep(pc, c, head, qi, kj);
        float du = p * (dp - dlt);
        if (HAS(F_SOFTCAP) && p != 0.0f) {
          const float th = z / pc->cap2;
          du *= 1.0f - th * th;
        }
        sh[DU + r * KS + cc] = du;
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint cc = 0; cc < BK; ++cc) {
      float kk[WD];
      UNROLL
      for (uint j = 0; j < WD; ++j) kk[j] = sh[YS + cc * DS + tx + j * RX];
      UNROLL
      for (uint i = 0; i < WQ; ++i) {
        const float u = sh[DU + (ty + i * RY) * KS + cc];
        UNROLL
        for (uint j = 0; j < WD; ++j) acc[i][j] = MAC(u, kk[j], acc[i][j]);
      }
    }
  }

  for (uint i = 0; i < WQ; ++i) {
    const int r = (int)(ty + i * RY);
    if (r >= rows) continue;
    const uint base = ((uint)(c->q_start + i0 + r) * pc->heads + head) * D;
    UNROLL
    for (uint j = 0; j < WD; ++j) {
      const uint d = tx + j * RX;
      if (d < D) ejk_store(dq, base + d, DT, acc[i][j] * pc->softmax_scale);
    }
  }
}

// ---- backward: deterministic reductions ----------------------------------------------------
// F_FINISH_DBIAS: dbias[bb, hh, i, j] = sum over the broadcast batch and head dimensions of the
// f32 scratch [batch, heads, seq_q, seq_k], in a fixed order. Otherwise: dsoftmax_aux[h] = sum
// of the prep pass's shares, in a fixed order. A 1-D grid strides over the outputs.

__kernel __attribute__((reqd_work_group_size(PREP_NT, 1, 1))) void fa_finish(BWD_ARGS) {
  EJK_LOCAL_BIND(float, sh)
  const Params* pc = &P;
  const uint stride = get_global_size(0);
  if (HAS(F_FINISH_DBIAS)) {
    const uint plane = pc->seq_q * pc->seq_k, total = pc->bias_batch * pc->bias_heads * plane;
    for (uint e = get_global_id(0); e < total; e += stride) {
      const uint ij = e % plane, bh = e / plane, hh = bh % pc->bias_heads, bb = bh / pc->bias_heads;
      const uint b0 = pc->bias_batch == 1u ? 0u : bb, b1 = pc->bias_batch == 1u ? pc->batch : bb + 1u;
      const uint h0 = pc->bias_heads == 1u ? 0u : hh, h1 = pc->bias_heads == 1u ? pc->heads : hh + 1u;
      float s = 0.0f;
      for (uint b = b0; b < b1; ++b)
        for (uint h = h0; h < h1; ++h) s += dbscr[(b * pc->heads + h) * plane + ij];
      ejk_store(dbias, e, BIAS_DT, s);
    }
  } else {
    for (uint h = get_global_id(0); h < pc->heads; h += stride) {
      float s = 0.0f;
      for (uint b = 0; b < pc->batch; ++b)
        for (uint x = 0; x < pc->extra; ++x) s += part[(b * pc->heads + h) * pc->extra + x];
      ejk_store(dsinks, h, SINKS_DT, s);
    }
  }
}
