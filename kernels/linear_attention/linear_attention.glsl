// The linear-attention engine on Vulkan: linear_attention.cl's three kernels (see plan.hpp and
// vulkan.cpp), one module each, included with PASS and ELEM16 set (0: f32 arrays; 1: f16 or
// bf16 arrays through 16-bit storage, pc.dtype picking which). Widths, tile sizes and which
// per-channel gates exist are specialization constants; the rest are push constants. Outputs
// that a pass keeps in f32 are written through a float view of the same binding.
#extension GL_EXT_control_flow_attributes : require
#if ELEM16
#extension GL_EXT_shader_16bit_storage : require
#endif
#include "common/vulkan.glsl"

#define LA_TOKEN 0
#define LA_CHUNK 1
#define LA_GATES 2

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
layout(constant_id = 3) const uint R = 16;      // query/key width of the pass (gates: K)
layout(constant_id = 4) const uint C = 16;      // value width (gates: V)
layout(constant_id = 5) const uint BV = 16;     // value columns per group
layout(constant_id = 6) const uint TILE = 1;    // token: k_split; chunk: tokens per chunk
layout(constant_id = 7) const uint HAS_RG = 0;  // row gates present
layout(constant_id = 8) const uint HAS_CG = 0;  // column gates present

const uint THREADS = gl_WorkGroupSize.x;

#if ELEM16
#define ELEM uint16_t
#define LOAD(a, i) EJK_LD16(a, i, pc.dtype)
#define STORE(a, i, x) EJK_ST16(a, i, pc.dtype, x)
#else
#define ELEM float
#define LOAD(a, i) a[i]
#define STORE(a, i, x) a[i] = (x)
#endif

#if PASS != LA_GATES
layout(push_constant) uniform Push {
  uint heads, seq, varlen, dtype;
  uint out_f32, fin_f32, has_g, has_gamma;
  uint has_init, has_fin, transposed, reverse;
  int shift;
  float out_scale, kv_scale;
} pc;

layout(binding = 0) readonly buffer QB { ELEM Q[]; };
layout(binding = 1) readonly buffer KB { ELEM KX[]; };
layout(binding = 2) readonly buffer VB { ELEM VX[]; };
layout(binding = 3) readonly buffer GB { ELEM G[]; };
layout(binding = 4) readonly buffer GammaB { ELEM GAMMA[]; };
layout(binding = 5) readonly buffer RGB { ELEM RGATE[]; };
layout(binding = 6) readonly buffer CGB { ELEM CGATE[]; };
layout(binding = 7) readonly buffer InitB { ELEM INIT[]; };
layout(binding = 8) readonly buffer CuB { int CU[]; };
layout(binding = 9) writeonly buffer OutB { ELEM OUT[]; };
layout(binding = 9) writeonly buffer Out32B { float OUT32[]; };
layout(binding = 10) writeonly buffer FinB { ELEM FIN[]; };
layout(binding = 10) writeonly buffer Fin32B { float FIN32[]; };

void store_out(uint i, float x) {
  if (pc.out_f32 != 0u) OUT32[i] = x;
  else STORE(OUT, i, x);
}
void store_fin(uint i, float x) {
  if (pc.fin_f32 != 0u) FIN32[i] = x;
  else STORE(FIN, i, x);
}

uint state_index(uint n, uint h, uint r, uint c) {
  return (n * pc.heads + h) * (R * C) + (pc.transposed != 0u ? c * R + r : r * C + c);
}
// The gate token of position pos (-1 outside the sequence) and its scalar log-decay.
int gate_token(int pos, int L, int start) {
  const int u = (pc.reverse != 0u ? L - 1 - pos : pos) + pc.shift;
  return u < 0 || u >= L ? -1 : start + u;
}
float scalar_gate(int gt, uint h) {
  if (gt < 0) return 0.0;
  float a = 0.0;
  if (pc.has_g != 0u) a += LOAD(G, uint(gt) * pc.heads + h);
  if (pc.has_gamma != 0u) a += LOAD(GAMMA, h);
  return a;
}
int token_of(int pos, int L, int start) { return start + (pc.reverse != 0u ? L - 1 - pos : pos); }
#endif

#if PASS == LA_TOKEN
// One group per (slice of BV value columns, head, sequence); invocation (row set, column): the
// state in registers, every KS-th row.
const uint KS = TILE;
const uint RPT = EJK_CEIL_DIV(R, KS);
shared float lq[R], lk[R], lrd[R], lv[BV], lcd[BV], red[THREADS];

void main() {
  const uint sl = gl_WorkGroupID.x, h = gl_WorkGroupID.y, n = gl_WorkGroupID.z, lid = gl_LocalInvocationID.x;
  const int start = pc.varlen != 0u ? CU[n] : int(n * pc.seq);
  const int L = pc.varlen != 0u ? CU[n + 1] - start : int(pc.seq);
  const uint c = lid % BV, r0 = lid / BV, col = sl * BV + c;
  float s[RPT];
  [[unroll]] for (uint m = 0; m < RPT; ++m) {
    const uint r = r0 + m * KS;
    s[m] = pc.has_init != 0u && r < R && col < C ? LOAD(INIT, state_index(n, h, r, col)) : 0.0;
  }
  for (int pos = 0; pos < L; ++pos) {
    const int gt = gate_token(pos, L, start);
    const float a = scalar_gate(gt, h);
    const uint th = uint(token_of(pos, L, start)) * pc.heads + h;
    for (uint i = lid; i < R; i += THREADS) {
      lq[i] = LOAD(Q, th * R + i);
      lk[i] = pc.kv_scale * LOAD(KX, th * R + i);
      float x = a;
      if (HAS_RG != 0u && gt >= 0) x += LOAD(RGATE, (uint(gt) * pc.heads + h) * R + i);
      lrd[i] = exp(x);
    }
    for (uint j = lid; j < BV; j += THREADS) {
      const uint cc = sl * BV + j;
      lv[j] = cc < C ? LOAD(VX, th * C + cc) : 0.0;
      lcd[j] = HAS_CG != 0u && gt >= 0 && cc < C ? exp(LOAD(CGATE, (uint(gt) * pc.heads + h) * C + cc)) : 1.0;
    }
    barrier();
    const float dc = lcd[c], vc = lv[c];
    float acc = 0.0;
    [[unroll]] for (uint m = 0; m < RPT; ++m) {
      const uint r = r0 + m * KS;
      if (r < R) {
        s[m] = fma(s[m] * lrd[r], dc, lk[r] * vc);
        acc = fma(lq[r], s[m], acc);
      }
    }
    red[lid] = acc;
    barrier();
    if (lid < BV && col < C) {
      float o = 0.0;
      for (uint k = 0; k < KS; ++k) o += red[k * BV + lid];
      store_out(th * C + col, pc.out_scale * o);
    }
  }
  if (pc.has_fin != 0u)
    [[unroll]] for (uint m = 0; m < RPT; ++m) {
      const uint r = r0 + m * KS;
      if (r < R && col < C) store_fin(state_index(n, h, r, col), s[m]);
    }
}

#elif PASS == LA_CHUNK
// One group per (slice of BV value columns, head, sequence), chunk after chunk: scores with
// their relative decays (exact for any gates), the output from the state and the scores, then
// one state update; the state [R, BV] in shared memory. Keys and their gates are stored
// channel-major, so that invocations of consecutive scores read consecutive words.
const uint CH = TILE;
const uint RP = R + 1, BVP = BV + 1, CHP = CH + 1;
shared float lq[CH * RP], lk[R * CHP], lv[CH * BVP], lA[CH * CHP], lS[R * BVP], braw[CH], bc[CH];
shared float lB[HAS_RG != 0u ? R * CHP : 1];
shared float lC[HAS_CG != 0u ? CH * BVP : 1];

void main() {
  const uint sl = gl_WorkGroupID.x, h = gl_WorkGroupID.y, n = gl_WorkGroupID.z, lid = gl_LocalInvocationID.x;
  const int start = pc.varlen != 0u ? CU[n] : int(n * pc.seq);
  const int L = pc.varlen != 0u ? CU[n + 1] - start : int(pc.seq);
  const uint c0 = sl * BV;
  for (uint e = lid; e < R * BV; e += THREADS) {
    const uint r = e / BV, j = e % BV;
    lS[r * BVP + j] = pc.has_init != 0u && c0 + j < C ? LOAD(INIT, state_index(n, h, r, c0 + j)) : 0.0;
  }
  for (int p0 = 0; p0 < L; p0 += int(CH)) {
    const uint nv = uint(min(int(CH), L - p0));
    for (uint e = lid; e < CH * R; e += THREADS) {
      const uint t = e / R, i = e % R;
      float q = 0.0, k = 0.0, b = 0.0;
      if (t < nv) {
        const uint th = uint(token_of(p0 + int(t), L, start)) * pc.heads + h;
        q = LOAD(Q, th * R + i);
        k = pc.kv_scale * LOAD(KX, th * R + i);
        if (HAS_RG != 0u) {
          const int gt = gate_token(p0 + int(t), L, start);
          if (gt >= 0) b = LOAD(RGATE, (uint(gt) * pc.heads + h) * R + i);
        }
      }
      lq[t * RP + i] = q;
      lk[i * CHP + t] = k;
      if (HAS_RG != 0u) lB[i * CHP + t] = b;
    }
    for (uint e = lid; e < CH * BV; e += THREADS) {
      const uint t = e / BV, j = e % BV;
      float v = 0.0, cg = 0.0;
      if (t < nv && c0 + j < C) {
        const uint th = uint(token_of(p0 + int(t), L, start)) * pc.heads + h;
        v = LOAD(VX, th * C + c0 + j);
        if (HAS_CG != 0u) {
          const int gt = gate_token(p0 + int(t), L, start);
          if (gt >= 0) cg = LOAD(CGATE, (uint(gt) * pc.heads + h) * C + c0 + j);
        }
      }
      lv[t * BVP + j] = v;
      if (HAS_CG != 0u) lC[t * BVP + j] = cg;
    }
    for (uint t = lid; t < CH; t += THREADS) braw[t] = t < nv ? scalar_gate(gate_token(p0 + int(t), L, start), h) : 0.0;
    barrier();
    // Cumulative log-decays from the chunk's start, inclusive.
    if (HAS_RG != 0u)
      for (uint i = lid; i < R; i += THREADS) {
        float run = 0.0;
        for (uint t = 0; t < CH; ++t) {
          run += braw[t] + lB[i * CHP + t];
          lB[i * CHP + t] = run;
        }
      }
    if (HAS_CG != 0u)
      for (uint j = lid; j < BV; j += THREADS) {
        float run = 0.0;
        for (uint t = 0; t < CH; ++t) {
          run += lC[t * BVP + j];
          lC[t * BVP + j] = run;
        }
      }
    if (lid == 0u) {
      float run = 0.0;
      for (uint t = 0; t < CH; ++t) {
        run += braw[t];
        bc[t] = run;
      }
    }
    barrier();
    for (uint e = lid; e < CH * CH; e += THREADS) {
      const uint t = e / CH, s = e % CH;
      float acc = 0.0;
      if (s <= t) {
        if (HAS_RG != 0u) {
          for (uint i = 0; i < R; ++i) acc = fma(lq[t * RP + i] * lk[i * CHP + s], exp(lB[i * CHP + t] - lB[i * CHP + s]), acc);
        } else {
          for (uint i = 0; i < R; ++i) acc = fma(lq[t * RP + i], lk[i * CHP + s], acc);
          acc *= exp(bc[t] - bc[s]);
        }
      }
      lA[t * CHP + s] = acc;
    }
    barrier();
    // Queries decayed from the chunk's start.
    for (uint e = lid; e < CH * R; e += THREADS) {
      const uint t = e / R, i = e % R;
      lq[t * RP + i] *= exp(HAS_RG != 0u ? lB[i * CHP + t] : bc[t]);
    }
    barrier();
    // Four tokens per invocation: each state word read from shared memory serves four outputs.
    for (uint e = lid; e < (CH / 4) * BV; e += THREADS) {
      const uint t0 = (e / BV) * 4, j = e % BV;
      if (t0 < nv && c0 + j < C) {
        float inter[4] = float[4](0.0, 0.0, 0.0, 0.0);
        for (uint i = 0; i < R; ++i) {
          const float sv = lS[i * BVP + j];
          [[unroll]] for (uint k = 0; k < 4; ++k) inter[k] = fma(lq[(t0 + k) * RP + i], sv, inter[k]);
        }
        for (uint k = 0; k < 4 && t0 + k < nv; ++k) {
          const uint t = t0 + k;
          float intra = 0.0, o = inter[k];
          if (HAS_CG != 0u) {
            const float ct = lC[t * BVP + j];
            o *= exp(ct);
            for (uint s = 0; s <= t; ++s) intra = fma(lA[t * CHP + s] * lv[s * BVP + j], exp(ct - lC[s * BVP + j]), intra);
          } else {
            for (uint s = 0; s <= t; ++s) intra = fma(lA[t * CHP + s], lv[s * BVP + j], intra);
          }
          const uint th = uint(token_of(p0 + int(t), L, start)) * pc.heads + h;
          store_out(th * C + c0 + j, pc.out_scale * (o + intra));
        }
      }
    }
    barrier();
    // Keys and values decayed to the chunk's end.
    for (uint e = lid; e < CH * R; e += THREADS) {
      const uint t = e / R, i = e % R;
      lk[i * CHP + t] *= exp(HAS_RG != 0u ? lB[i * CHP + (CH - 1)] - lB[i * CHP + t] : bc[CH - 1] - bc[t]);
    }
    if (HAS_CG != 0u)
      for (uint e = lid; e < CH * BV; e += THREADS) {
        const uint t = e / BV, j = e % BV;
        lv[t * BVP + j] *= exp(lC[(CH - 1) * BVP + j] - lC[t * BVP + j]);
      }
    barrier();
    // Four state rows per invocation: each value word read serves four rows.
    for (uint e = lid; e < ((R + 3) / 4) * BV; e += THREADS) {
      const uint i0 = (e / BV) * 4, j = e % BV;
      float acc[4];
      [[unroll]] for (uint k = 0; k < 4; ++k) {
        const uint i = min(i0 + k, R - 1);
        float d = exp(HAS_RG != 0u ? lB[i * CHP + (CH - 1)] : bc[CH - 1]);
        if (HAS_CG != 0u) d *= exp(lC[(CH - 1) * BVP + j]);
        acc[k] = lS[i * BVP + j] * d;
      }
      for (uint t = 0; t < CH; ++t) {
        const float vv = lv[t * BVP + j];
        [[unroll]] for (uint k = 0; k < 4; ++k) acc[k] = fma(lk[min(i0 + k, R - 1) * CHP + t], vv, acc[k]);
      }
      for (uint k = 0; k < 4 && i0 + k < R; ++k) lS[(i0 + k) * BVP + j] = acc[k];
    }
    barrier();
  }
  if (pc.has_fin != 0u)
    for (uint e = lid; e < R * BV; e += THREADS) {
      const uint r = e / BV, j = e % BV;
      if (c0 + j < C) store_fin(state_index(n, h, r, c0 + j), lS[r * BVP + j]);
    }
}

#elif PASS == LA_GATES
// The backward's gate pass, one group per (head, sequence); R = K, C = V.
layout(push_constant) uniform Push {
  uint heads, seq, varlen, dtype;
  uint has_g, has_gamma, has_gk, has_gv;
  uint has_ht, has_h0, reverse;
} pc;
layout(binding = 0) readonly buffer QB { ELEM QA[]; };
layout(binding = 1) readonly buffer KB { ELEM KA[]; };
layout(binding = 2) readonly buffer VB { ELEM VA[]; };
layout(binding = 3) readonly buffer DOB { ELEM DO[]; };
layout(binding = 4) readonly buffer GB { ELEM G[]; };
layout(binding = 5) readonly buffer GammaB { ELEM GAMMA[]; };
layout(binding = 6) readonly buffer GKB { ELEM GK[]; };
layout(binding = 7) readonly buffer GVB { ELEM GV[]; };
layout(binding = 8) readonly buffer DHTB { ELEM DHT[]; };
layout(binding = 9) readonly buffer CuB { int CU[]; };
layout(binding = 10) readonly buffer DQ32B { float DQ32[]; };
layout(binding = 11) readonly buffer DK32B { float DK32[]; };
layout(binding = 12) readonly buffer DV32B { float DV32[]; };
layout(binding = 13) readonly buffer O32B { float O32[]; };
layout(binding = 14) readonly buffer ST32B { float ST32[]; };
layout(binding = 15) readonly buffer DS032B { float DS032[]; };
layout(binding = 16) writeonly buffer DQB { ELEM DQ[]; };
layout(binding = 17) writeonly buffer DKB { ELEM DK[]; };
layout(binding = 18) writeonly buffer DVB { ELEM DV[]; };
layout(binding = 19) writeonly buffer DGB { ELEM DG[]; };
layout(binding = 20) writeonly buffer DGKB { ELEM DGK[]; };
layout(binding = 21) writeonly buffer DGVB { ELEM DGV[]; };
layout(binding = 22) writeonly buffer DH0B { ELEM DH0[]; };

shared float fk[R], fv[C], rows[THREADS];
shared float carry;

uint tok(int pos, int L, int start) { return uint(start + (pc.reverse != 0u ? L - 1 - pos : pos)); }

void main() {
  const uint h = gl_WorkGroupID.x, n = gl_WorkGroupID.y, lid = gl_LocalInvocationID.x;
  const int start = pc.varlen != 0u ? CU[n] : int(n * pc.seq);
  const int L = pc.varlen != 0u ? CU[n + 1] - start : int(pc.seq);
  for (uint e = lid; e < uint(L) * R; e += THREADS) {
    const uint i = ((uint(start) + e / R) * pc.heads + h) * R + e % R;
    STORE(DQ, i, DQ32[i]);
    STORE(DK, i, DK32[i]);
  }
  for (uint e = lid; e < uint(L) * C; e += THREADS) {
    const uint i = ((uint(start) + e / C) * pc.heads + h) * C + e % C;
    STORE(DV, i, DV32[i]);
  }
  // The final state's term: dht (.) S_T (ST32 in [K, V]).
  const uint s0 = (n * pc.heads + h) * R * C;
  for (uint i = lid; i < R; i += THREADS) {
    float x = 0.0;
    if (pc.has_ht != 0u)
      for (uint j = 0; j < C; ++j) x = fma(LOAD(DHT, s0 + i * C + j), ST32[s0 + i * C + j], x);
    fk[i] = x;
  }
  for (uint j = lid; j < C; j += THREADS) {
    float x = 0.0;
    if (pc.has_ht != 0u)
      for (uint i = 0; i < R; ++i) x = fma(LOAD(DHT, s0 + i * C + j), ST32[s0 + i * C + j], x);
    fv[j] = x;
  }
  barrier();
  // Reverse-cumulative sums from the last processed token: per channel for gk and gv ...
  if (pc.has_gk != 0u)
    for (uint i = lid; i < R; i += THREADS) {
      float run = fk[i];
      for (int pos = L - 1; pos >= 0; --pos) {
        const uint x = (tok(pos, L, start) * pc.heads + h) * R + i;
        run += LOAD(QA, x) * DQ32[x] - LOAD(KA, x) * DK32[x];
        STORE(DGK, x, run);
      }
    }
  if (pc.has_gv != 0u)
    for (uint j = lid; j < C; j += THREADS) {
      float run = fv[j];
      for (int pos = L - 1; pos >= 0; --pos) {
        const uint x = (tok(pos, L, start) * pc.heads + h) * C + j;
        run += O32[x] * LOAD(DO, x) - LOAD(VA, x) * DV32[x];
        STORE(DGV, x, run);
      }
    }
  // ... and per token for g: row sums of a block of THREADS positions in parallel, then their
  // running sum by one invocation.
  if (pc.has_g != 0u) {
    if (lid == 0u) {
      float f = 0.0;
      for (uint i = 0; i < R; ++i) f += fk[i];
      carry = f;
    }
    for (int top = L - 1; top >= 0; top -= int(THREADS)) {
      const int pos = top - int(lid);
      float x = 0.0;
      if (pos >= 0) {
        const uint t = (tok(pos, L, start) * pc.heads + h) * R;
        for (uint i = 0; i < R; ++i) x += LOAD(QA, t + i) * DQ32[t + i] - LOAD(KA, t + i) * DK32[t + i];
      }
      rows[lid] = x;
      barrier();
      if (lid == 0u) {
        float run = carry;
        for (int k = 0; k < int(THREADS) && top - k >= 0; ++k) {
          run += rows[k];
          STORE(DG, tok(top - k, L, start) * pc.heads + h, run);
        }
        carry = run;
      }
      barrier();
    }
  }
  // dh0: dS_0 decayed by the first processed token.
  if (pc.has_h0 != 0u) {
    const int first = L > 0 ? int(tok(0, L, start)) : -1;
    float a = 0.0;
    if (first >= 0) {
      if (pc.has_g != 0u) a += LOAD(G, uint(first) * pc.heads + h);
      if (pc.has_gamma != 0u) a += LOAD(GAMMA, h);
    }
    for (uint e = lid; e < R * C; e += THREADS) {
      const uint i = e / C, j = e % C;
      float lg = a;
      if (first >= 0 && pc.has_gk != 0u) lg += LOAD(GK, (uint(first) * pc.heads + h) * R + i);
      if (first >= 0 && pc.has_gv != 0u) lg += LOAD(GV, (uint(first) * pc.heads + h) * C + j);
      STORE(DH0, s0 + e, DS032[s0 + e] * exp(lg));
    }
  }
}
#endif
