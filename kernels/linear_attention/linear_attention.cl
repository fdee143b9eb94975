// The linear-attention engine on OpenCL C 1.2 (see plan.hpp for the passes and opencl.cpp for
// the launches): la_token (the token recurrence), la_chunk (the chunked form) and la_gates (the
// backward's gate pass).
//
// Compile-time (-D): R, C (query/key and value widths of the pass), BV (value columns per group),
// THREADS; la_token: KS (work-items sharing a column, each holding every KS-th row of the state);
// la_chunk: CH (tokens per chunk), HAS_RG / HAS_CG (row / column gates present). Everything else
// is an argument, the storage dtype included (0 f32, 1 f16, 2 bf16), so one program serves f16
// and bf16. Float arrays are passed as 16-bit words and read as floats where f32; absent ones
// are any buffer, never read. All arithmetic is f32.

#include "common/clc.h"

// What every engine pass takes besides the arrays.
#define ENGINE_ARGS                                                                                          \
  const __global ushort *Q, const __global ushort *KX, const __global ushort *VX, const __global ushort *G,  \
      const __global ushort *GAMMA, const __global ushort *RGATE, const __global ushort *CGATE,              \
      const __global ushort *INIT, const __global int *CU, __global ushort *OUT, __global ushort *FIN,       \
      int heads, int seq, int varlen, int dtype, int out_dtype, int fin_dtype, int has_g, int has_gamma,     \
      int has_init, int has_fin, int transposed, float out_scale, float kv_scale, int shift, int reverse

// Sequence n's first token (flattened) and length.
#define SEQUENCE(n, start, L)                 \
  const int start = varlen ? CU[n] : (n) * seq; \
  const int L = varlen ? CU[(n) + 1] - start : seq;

// State element (r, c) of sequence n, head h.
int state_index(int n, int h, int heads, int r, int c, int transposed) {
  return (n * heads + h) * (R * C) + (transposed ? c * R + r : r * C + c);
}

// The gate token of position pos (-1 outside the sequence) and its scalar log-decay.
int gate_token(int pos, int L, int start, int shift, int reverse) {
  const int u = (reverse ? L - 1 - pos : pos) + shift;
  return u < 0 || u >= L ? -1 : start + u;
}
float scalar_gate(const __global ushort* G, const __global ushort* GAMMA, int gt, int h, int heads, int has_g,
                  int has_gamma, int dtype) {
  if (gt < 0) return 0.f;
  float a = 0.f;
  if (has_g) a += ejk_load(G, gt * heads + h, dtype);
  if (has_gamma) a += ejk_load(GAMMA, h, dtype);
  return a;
}

#ifdef KS
// One group per (slice of BV value columns, head, sequence); work-item (row set, column):
// the state in registers, every KS-th row.
#define RPT EJK_CEIL_DIV(R, KS)
__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void la_token(ENGINE_ARGS) {
  const int sl = get_group_id(0), h = get_group_id(1), n = get_group_id(2), lid = get_local_id(0);
  SEQUENCE(n, start, L)
  const int c = lid % BV, r0 = lid / BV, col = sl * BV + c;
  __local float lq[R], lk[R], lrd[R], lv[BV], lcd[BV], red[THREADS];
  float s[RPT];
  for (int m = 0; m < RPT; ++m) {
    const int r = r0 + m * KS;
    s[m] = has_init && r < R && col < C ? ejk_load(INIT, state_index(n, h, heads, r, col, transposed), dtype) : 0.f;
  }
  for (int pos = 0; pos < L; ++pos) {
    const int tok = start + (reverse ? L - 1 - pos : pos), gt = gate_token(pos, L, start, shift, reverse);
    const float a = scalar_gate(G, GAMMA, gt, h, heads, has_g, has_gamma, dtype);
    const int th = tok * heads + h;
    for (int i = lid; i < R; i += THREADS) {
      lq[i] = ejk_load(Q, th * R + i, dtype);
      lk[i] = kv_scale * ejk_load(KX, th * R + i, dtype);
#if HAS_RG
      lrd[i] = exp(a + (gt >= 0 ? ejk_load(RGATE, (gt * heads + h) * R + i, dtype) : 0.f));
#else
      lrd[i] = exp(a);
#endif
    }
    for (int j = lid; j < BV; j += THREADS) {
      const int cc = sl * BV + j;
      lv[j] = cc < C ? ejk_load(VX, th * C + cc, dtype) : 0.f;
#if HAS_CG
      lcd[j] = gt >= 0 && cc < C ? exp(ejk_load(CGATE, (gt * heads + h) * C + cc, dtype)) : 1.f;
#else
      lcd[j] = 1.f;
#endif
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const float dc = lcd[c], vc = lv[c];
    float acc = 0.f;
    for (int m = 0; m < RPT; ++m) {
      const int r = r0 + m * KS;
      if (r < R) {
        s[m] = mad(s[m] * lrd[r], dc, lk[r] * vc);
        acc = mad(lq[r], s[m], acc);
      }
    }
    red[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < BV && col < C) {
      float o = 0.f;
      for (int k = 0; k < KS; ++k) o += red[k * BV + lid];
      ejk_store(OUT, th * C + col, out_dtype, out_scale * o);
    }
  }
  if (has_fin)
    for (int m = 0; m < RPT; ++m) {
      const int r = r0 + m * KS;
      if (r < R && col < C) ejk_store(FIN, state_index(n, h, heads, r, col, transposed), fin_dtype, s[m]);
    }
}
#endif

#ifdef CH
// One group per (slice of BV value columns, head, sequence), chunk after chunk: scores with
// their relative decays (exact for any gates), the output from the state and the scores, then
// one state update; the state [R, BV] in local memory. Keys and their gates are stored
// channel-major, so that work-items of consecutive scores read consecutive words.
#define RP (R + 1)
#define BVP (BV + 1)
#define CHP (CH + 1)
__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void la_chunk(ENGINE_ARGS) {
  const int sl = get_group_id(0), h = get_group_id(1), n = get_group_id(2), lid = get_local_id(0);
  SEQUENCE(n, start, L)
  const int c0 = sl * BV;
  __local float lq[CH * RP], lk[R * CHP], lv[CH * BVP], lA[CH * CHP], lS[R * BVP], braw[CH], bc[CH];
#if HAS_RG
  __local float lB[R * CHP];
#endif
#if HAS_CG
  __local float lC[CH * BVP];
#endif
  for (int e = lid; e < R * BV; e += THREADS) {
    const int r = e / BV, j = e % BV;
    lS[r * BVP + j] = has_init && c0 + j < C ? ejk_load(INIT, state_index(n, h, heads, r, c0 + j, transposed), dtype) : 0.f;
  }
  for (int p0 = 0; p0 < L; p0 += CH) {
    const int nv = min(CH, L - p0);
    for (int e = lid; e < CH * R; e += THREADS) {
      const int t = e / R, i = e % R;
      float q = 0.f, k = 0.f, b = 0.f;
      if (t < nv) {
        const int th = (start + (reverse ? L - 1 - (p0 + t) : p0 + t)) * heads + h;
        q = ejk_load(Q, th * R + i, dtype);
        k = kv_scale * ejk_load(KX, th * R + i, dtype);
#if HAS_RG
        const int gt = gate_token(p0 + t, L, start, shift, reverse);
        if (gt >= 0) b = ejk_load(RGATE, (gt * heads + h) * R + i, dtype);
#endif
      }
      lq[t * RP + i] = q;
      lk[i * CHP + t] = k;
#if HAS_RG
      lB[i * CHP + t] = b;
#endif
    }
    for (int e = lid; e < CH * BV; e += THREADS) {
      const int t = e / BV, j = e % BV;
      float v = 0.f, cg = 0.f;
      if (t < nv && c0 + j < C) {
        const int th = (start + (reverse ? L - 1 - (p0 + t) : p0 + t)) * heads + h;
        v = ejk_load(VX, th * C + c0 + j, dtype);
#if HAS_CG
        const int gt = gate_token(p0 + t, L, start, shift, reverse);
        if (gt >= 0) cg = ejk_load(CGATE, (gt * heads + h) * C + c0 + j, dtype);
#endif
      }
      lv[t * BVP + j] = v;
#if HAS_CG
      lC[t * BVP + j] = cg;
#endif
    }
    for (int t = lid; t < CH; t += THREADS)
      braw[t] = t < nv ? scalar_gate(G, GAMMA, gate_token(p0 + t, L, start, shift, reverse), h, heads, has_g, has_gamma, dtype) : 0.f;
    barrier(CLK_LOCAL_MEM_FENCE);
    // Cumulative log-decays from the chunk's start, inclusive.
#if HAS_RG
    for (int i = lid; i < R; i += THREADS) {
      float run = 0.f;
      for (int t = 0; t < CH; ++t) lB[i * CHP + t] = run += braw[t] + lB[i * CHP + t];
    }
#endif
#if HAS_CG
    for (int j = lid; j < BV; j += THREADS) {
      float run = 0.f;
      for (int t = 0; t < CH; ++t) lC[t * BVP + j] = run += lC[t * BVP + j];
    }
#endif
    if (lid == 0) {
      float run = 0.f;
      for (int t = 0; t < CH; ++t) bc[t] = run += braw[t];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = lid; e < CH * CH; e += THREADS) {
      const int t = e / CH, s = e % CH;
      float acc = 0.f;
      if (s <= t) {
#if HAS_RG
        for (int i = 0; i < R; ++i) acc = mad(lq[t * RP + i] * lk[i * CHP + s], exp(lB[i * CHP + t] - lB[i * CHP + s]), acc);
#else
        for (int i = 0; i < R; ++i) acc = mad(lq[t * RP + i], lk[i * CHP + s], acc);
        acc *= exp(bc[t] - bc[s]);
#endif
      }
      lA[t * CHP + s] = acc;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    // Queries decayed from the chunk's start.
    for (int e = lid; e < CH * R; e += THREADS) {
      const int t = e / R, i = e % R;
#if HAS_RG
      lq[t * RP + i] *= exp(lB[i * CHP + t]);
#else
      lq[t * RP + i] *= exp(bc[t]);
#endif
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    // Four tokens per work-item: each state word read from local memory serves four outputs.
    for (int e = lid; e < (CH / 4) * BV; e += THREADS) {
      const int t0 = (e / BV) * 4, j = e % BV;
      if (t0 < nv && c0 + j < C) {
        float inter[4] = {0.f, 0.f, 0.f, 0.f};
        for (int i = 0; i < R; ++i) {
          const float sv = lS[i * BVP + j];
          for (int k = 0; k < 4; ++k) inter[k] = mad(lq[(t0 + k) * RP + i], sv, inter[k]);
        }
        for (int k = 0; k < 4 && t0 + k < nv; ++k) {
          const int t = t0 + k;
          float intra = 0.f, o = inter[k];
#if HAS_CG
          const float ct = lC[t * BVP + j];
          o *= exp(ct);
          for (int s = 0; s <= t; ++s) intra = mad(lA[t * CHP + s] * lv[s * BVP + j], exp(ct - lC[s * BVP + j]), intra);
#else
          for (int s = 0; s <= t; ++s) intra = mad(lA[t * CHP + s], lv[s * BVP + j], intra);
#endif
          const int th = (start + (reverse ? L - 1 - (p0 + t) : p0 + t)) * heads + h;
          ejk_store(OUT, th * C + c0 + j, out_dtype, out_scale * (o + intra));
        }
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    // Keys and values decayed to the chunk's end.
    for (int e = lid; e < CH * R; e += THREADS) {
      const int t = e / R, i = e % R;
#if HAS_RG
      lk[i * CHP + t] *= exp(lB[i * CHP + (CH - 1)] - lB[i * CHP + t]);
#else
      lk[i * CHP + t] *= exp(bc[CH - 1] - bc[t]);
#endif
    }
#if HAS_CG
    for (int e = lid; e < CH * BV; e += THREADS) {
      const int t = e / BV, j = e % BV;
      lv[t * BVP + j] *= exp(lC[(CH - 1) * BVP + j] - lC[t * BVP + j]);
    }
#endif
    barrier(CLK_LOCAL_MEM_FENCE);
    // Four state rows per work-item: each value word read serves four rows.
    for (int e = lid; e < ((R + 3) / 4) * BV; e += THREADS) {
      const int i0 = (e / BV) * 4, j = e % BV;
      float acc[4];
      for (int k = 0; k < 4; ++k) {
        const int i = min(i0 + k, R - 1);
#if HAS_RG
        float d = exp(lB[i * CHP + (CH - 1)]);
#else
        float d = exp(bc[CH - 1]);
#endif
#if HAS_CG
        d *= exp(lC[(CH - 1) * BVP + j]);
#endif
        acc[k] = lS[i * BVP + j] * d;
      }
      for (int t = 0; t < CH; ++t) {
        const float vv = lv[t * BVP + j];
        for (int k = 0; k < 4; ++k) acc[k] = mad(lk[min(i0 + k, R - 1) * CHP + t], vv, acc[k]);
      }
      for (int k = 0; k < 4 && i0 + k < R; ++k) lS[(i0 + k) * BVP + j] = acc[k];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (has_fin)
    for (int e = lid; e < R * BV; e += THREADS) {
      const int r = e / BV, j = e % BV;
      if (c0 + j < C) ejk_store(FIN, state_index(n, h, heads, r, c0 + j, transposed), fin_dtype, lS[r * BVP + j]);
    }
}
#endif

#ifdef GATES
// The backward's gate pass, one group of THREADS per (head, sequence); R = K, C = V.
__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void la_gates(
    const __global ushort* Qa, const __global ushort* Ka, const __global ushort* Va, const __global ushort* DO,
    const __global ushort* G, const __global ushort* GAMMA, const __global ushort* GK, const __global ushort* GV,
    const __global ushort* DHT, const __global int* CU, const __global float* DQ32, const __global float* DK32,
    const __global float* DV32, const __global float* O32, const __global float* ST32, const __global float* DS032,
    __global ushort* DQ, __global ushort* DK, __global ushort* DV, __global ushort* DG, __global ushort* DGK,
    __global ushort* DGV, __global ushort* DH0, int heads, int seq, int varlen, int dtype, int has_g, int has_gamma,
    int has_gk, int has_gv, int has_ht, int has_h0, int reverse) {
  const int h = get_group_id(0), n = get_group_id(1), lid = get_local_id(0);
  SEQUENCE(n, start, L)
  __local float fk[R], fv[C], rows[THREADS], carry;
  for (int e = lid; e < L * R; e += THREADS) {
    const int i = ((start + e / R) * heads + h) * R + e % R;
    ejk_store(DQ, i, dtype, DQ32[i]);
    ejk_store(DK, i, dtype, DK32[i]);
  }
  for (int e = lid; e < L * C; e += THREADS) {
    const int i = ((start + e / C) * heads + h) * C + e % C;
    ejk_store(DV, i, dtype, DV32[i]);
  }
  // The final state's term: dht (.) S_T (ST32 in [K, V]).
  const int s0 = (n * heads + h) * R * C;
  for (int i = lid; i < R; i += THREADS) {
    float x = 0.f;
    if (has_ht)
      for (int j = 0; j < C; ++j) x = mad(ejk_load(DHT, s0 + i * C + j, dtype), ST32[s0 + i * C + j], x);
    fk[i] = x;
  }
  for (int j = lid; j < C; j += THREADS) {
    float x = 0.f;
    if (has_ht)
      for (int i = 0; i < R; ++i) x = mad(ejk_load(DHT, s0 + i * C + j, dtype), ST32[s0 + i * C + j], x);
    fv[j] = x;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  // Reverse-cumulative sums from the last processed token: per channel for gk and gv ...
  if (has_gk)
    for (int i = lid; i < R; i += THREADS) {
      float run = fk[i];
      for (int pos = L - 1; pos >= 0; --pos) {
        const int x = ((start + (reverse ? L - 1 - pos : pos)) * heads + h) * R + i;
        run += ejk_load(Qa, x, dtype) * DQ32[x] - ejk_load(Ka, x, dtype) * DK32[x];
        ejk_store(DGK, x, dtype, run);
      }
    }
  if (has_gv)
    for (int j = lid; j < C; j += THREADS) {
      float run = fv[j];
      for (int pos = L - 1; pos >= 0; --pos) {
        const int x = ((start + (reverse ? L - 1 - pos : pos)) * heads + h) * C + j;
        run += O32[x] * ejk_load(DO, x, dtype) - ejk_load(Va, x, dtype) * DV32[x];
        ejk_store(DGV, x, dtype, run);
      }
    }
  // ... and per token for g: row sums of a block of THREADS positions in parallel, then their
  // running sum by one work-item.
  if (has_g) {
    if (lid == 0) {
      float f = 0.f;
      for (int i = 0; i < R; ++i) f += fk[i];
      carry = f;
    }
    for (int top = L - 1; top >= 0; top -= THREADS) {
      const int pos = top - lid;
      float x = 0.f;
      if (pos >= 0) {
        const int t = ((start + (reverse ? L - 1 - pos : pos)) * heads + h) * R;
        for (int i = 0; i < R; ++i) x += ejk_load(Qa, t + i, dtype) * DQ32[t + i] - ejk_load(Ka, t + i, dtype) * DK32[t + i];
      }
      rows[lid] = x;
      barrier(CLK_LOCAL_MEM_FENCE);
      if (lid == 0) {
        float run = carry;
        for (int k = 0; k < THREADS && top - k >= 0; ++k) {
          run += rows[k];
          ejk_store(DG, (start + (reverse ? L - 1 - (top - k) : top - k)) * heads + h, dtype, run);
        }
        carry = run;
      }
      barrier(CLK_LOCAL_MEM_FENCE);
    }
  }
  // dh0: dS_0 decayed by the first processed token.
  if (has_h0) {
    const int first = L > 0 ? start + (reverse ? L - 1 : 0) : -1;
    const float a = first >= 0 ? scalar_gate(G, GAMMA, first, h, heads, has_g, has_gamma, dtype) : 0.f;
    for (int e = lid; e < R * C; e += THREADS) {
      const int i = e / C, j = e % C;
      float lg = a;
      if (first >= 0 && has_gk) lg += ejk_load(GK, (first * heads + h) * R + i, dtype);
      if (first >= 0 && has_gv) lg += ejk_load(GV, (first * heads + h) * C + j, dtype);
      ejk_store(DH0, s0 + e, dtype, DS032[s0 + e] * exp(lg));
    }
  }
}
#endif
