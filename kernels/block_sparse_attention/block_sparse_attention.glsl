// block_sparse_attention on Vulkan: the passes of block_sparse_attention.cl (see vulkan.cpp
// for the plan), one module each, included with PASS and ELEM16 set (0: f32 arrays; 1: f16 or
// bf16 arrays through 16-bit storage, pc.dtype picking which). The tile sizes and head_dim are
// specialization constants; shapes, options and the dtype are push constants.
#extension GL_EXT_control_flow_attributes : require
#if ELEM16
#extension GL_EXT_shader_16bit_storage : require
#endif
#include "common/vulkan.glsl"

#define BSA_FWD 0
#define BSA_DQ 1
#define BSA_DKDV 2

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
layout(constant_id = 3) const uint BLOCK_M = 16;  // queries per tile
layout(constant_id = 4) const uint BLOCK_N = 16;  // keys per tile
layout(constant_id = 5) const uint HEAD_DIM = 64;

#define F_CAUSAL 1u
#define F_SEGMENTS 2u
#define F_SOFTCAP 4u
#define HAS(f) ((pc.flags & (f)) != 0u)
#define NEG_INF uintBitsToFloat(0xff800000u)

// Mirrors the host's Params (tiles.hpp, vulkan.cpp).
layout(push_constant) uniform Push {
  int batch, seq_q, seq_k, heads;
  int kv_heads, block_q, block_k, nbq;
  int nbk, lb, lh;
  uint flags, dtype;
  float scale, cap;
} pc;

#if ELEM16
#define ELEM uint16_t
#define LOAD(a, i) EJK_LD16(a, i, pc.dtype)
#define STORE(a, i, x) EJK_ST16(a, i, pc.dtype, x)
#else
#define ELEM float
#define LOAD(a, i) a[i]
#define STORE(a, i, x) a[i] = (x)
#endif

int list_row(int b, int h, int blocks, int block) {
  return ((pc.lb == 1 ? 0 : b) * pc.lh + (pc.lh == 1 ? 0 : h)) * blocks + block;
}
int krow(int b, int j, int hk) { return ((b * pc.seq_k + j) * pc.kv_heads + hk) * int(HEAD_DIM); }
int qrow(int b, int i, int h) { return ((b * pc.seq_q + i) * pc.heads + h) * int(HEAD_DIM); }

// The capped logit from u = scale * q.k (tanh from exp, as the OpenCL program).
float cap_logit(float u) {
  if (!HAS(F_SOFTCAP)) return u;
  const float e = exp(-2.0 * abs(u / pc.cap));
  const float th = (1.0 - e) / (1.0 + e);
  return pc.cap * (u < 0.0 ? -th : th);
}
float cap_slope(float z) {
  if (!HAS(F_SOFTCAP)) return 1.0;
  const float t = z / pc.cap;
  return 1.0 - t * t;
}

#if PASS == BSA_FWD || PASS == BSA_DQ
layout(binding = 0) readonly buffer Q { ELEM q[]; };
layout(binding = 1) readonly buffer K { ELEM k[]; };
layout(binding = 2) readonly buffer V { ELEM v[]; };
#if PASS == BSA_FWD
layout(binding = 3) readonly buffer Counts { int counts[]; };
layout(binding = 4) readonly buffer Indices { int indices[]; };
layout(binding = 5) readonly buffer QSeg { int qseg[]; };
layout(binding = 6) readonly buffer KSeg { int kseg[]; };
layout(binding = 7) writeonly buffer Out { ELEM out_[]; };
layout(binding = 8) writeonly buffer Lse { float lse[]; };
#else
layout(binding = 3) readonly buffer Out { ELEM out_[]; };
layout(binding = 4) readonly buffer DOut { ELEM dout[]; };
layout(binding = 5) readonly buffer Lse { float lse[]; };
layout(binding = 6) readonly buffer Counts { int counts[]; };
layout(binding = 7) readonly buffer Indices { int indices[]; };
layout(binding = 8) readonly buffer QSeg { int qseg[]; };
layout(binding = 9) readonly buffer KSeg { int kseg[]; };
layout(binding = 10) writeonly buffer DQ { ELEM dq[]; };
#endif

shared float ks[BLOCK_N * HEAD_DIM];
shared float vs[BLOCK_N * HEAD_DIM];
shared int ksg[BLOCK_N];

// One group of BLOCK_M invocations per (query tile, head, batch), a query row each; tiles of
// BLOCK_N keys of every live key block staged in shared memory.
void main() {
  const int lid = int(gl_LocalInvocationID.x), h = int(gl_WorkGroupID.y), b = int(gl_WorkGroupID.z);
  const int i0 = int(gl_WorkGroupID.x * BLOCK_M), i = i0 + lid, hk = h / (pc.heads / pc.kv_heads);
  const int dd = pc.seq_k - pc.seq_q, i_last = min(i0 + int(BLOCK_M), pc.seq_q) - 1;
  const bool valid = i < pc.seq_q;
  float qr[HEAD_DIM], acc[HEAD_DIM];
#if PASS == BSA_DQ
  float g[HEAD_DIM];
  float D = 0.0;
#endif
  for (int d = 0; d < int(HEAD_DIM); ++d) {
    const int x = qrow(b, valid ? i : 0, h) + d;
    qr[d] = valid ? LOAD(q, x) * pc.scale : 0.0;
    acc[d] = 0.0;
#if PASS == BSA_DQ
    g[d] = valid ? LOAD(dout, x) : 0.0;
    D = fma(g[d], valid ? LOAD(out_, x) : 0.0, D);
#endif
  }
  const int qsg = HAS(F_SEGMENTS) && valid ? qseg[b * pc.seq_q + i] : 0;
#if PASS == BSA_FWD
  float m = NEG_INF, l = 0.0;
#else
  const float L = valid ? lse[(b * pc.heads + h) * pc.seq_q + i] : NEG_INF;
#endif
  const int row = list_row(b, h, pc.nbq, i0 / pc.block_q), cnt = counts[row];
  for (int e = 0; e < cnt; ++e) {
    const int bj = indices[row * pc.nbk + e], jend = min(pc.seq_k, (bj + 1) * pc.block_k);
    // Key tiles wholly above the causal diagonal end the loop early (uniform over the group).
    const int jstop = HAS(F_CAUSAL) ? min(jend, i_last + dd + 1) : jend;
    for (int j0 = bj * pc.block_k; j0 < jstop; j0 += int(BLOCK_N)) {
      const int n = min(int(BLOCK_N), jend - j0);
      barrier();
      for (int x = lid; x < n * int(HEAD_DIM); x += int(BLOCK_M)) {
        const int r = x / int(HEAD_DIM), d = x - r * int(HEAD_DIM), idx = krow(b, j0 + r, hk) + d;
        ks[x] = LOAD(k, idx);
        vs[x] = LOAD(v, idx);
      }
      if (HAS(F_SEGMENTS))
        for (int x = lid; x < n; x += int(BLOCK_M)) ksg[x] = kseg[b * pc.seq_k + j0 + x];
      barrier();
#if PASS == BSA_FWD
      // Per-row work inside ifs: control flow around the barriers stays uniform.
      if (valid) {
        float s[BLOCK_N];
        float top = m;
        for (int c = 0; c < n; ++c) {
          const int j = j0 + c;
          s[c] = NEG_INF;
          if ((HAS(F_CAUSAL) && j > i + dd) || (HAS(F_SEGMENTS) && ksg[c] != qsg)) continue;
          float dot = 0.0;
          for (int d = 0; d < int(HEAD_DIM); ++d) dot = fma(qr[d], ks[c * int(HEAD_DIM) + d], dot);
          s[c] = cap_logit(dot);
          top = max(top, s[c]);
        }
        if (top != NEG_INF) {  // else nothing is allowed in this row yet
          const float alpha = m == NEG_INF ? 0.0 : exp(m - top);
          float sum = 0.0;
          for (int c = 0; c < n; ++c) {
            s[c] = s[c] == NEG_INF ? 0.0 : exp(s[c] - top);
            sum += s[c];
          }
          l = l * alpha + sum;
          m = top;
          for (int d = 0; d < int(HEAD_DIM); ++d) {
            float a = acc[d] * alpha;
            for (int c = 0; c < n; ++c) a = fma(s[c], vs[c * int(HEAD_DIM) + d], a);
            acc[d] = a;
          }
        }
      }
#else
      if (L != NEG_INF) {  // else no allowed key: zero gradient (and invalid rows)
        for (int c = 0; c < n; ++c) {
          const int j = j0 + c;
          if ((HAS(F_CAUSAL) && j > i + dd) || (HAS(F_SEGMENTS) && ksg[c] != qsg)) continue;
          float dot = 0.0, dp = 0.0;
          for (int d = 0; d < int(HEAD_DIM); ++d) {
            dot = fma(qr[d], ks[c * int(HEAD_DIM) + d], dot);
            dp = fma(g[d], vs[c * int(HEAD_DIM) + d], dp);
          }
          const float z = cap_logit(dot);
          const float ds = exp(z - L) * (dp - D) * cap_slope(z) * pc.scale;
          for (int d = 0; d < int(HEAD_DIM); ++d) acc[d] = fma(ds, ks[c * int(HEAD_DIM) + d], acc[d]);
        }
      }
#endif
    }
  }
  if (!valid) return;
#if PASS == BSA_FWD
  const float inv = l > 0.0 ? 1.0 / l : 0.0;  // a row with no allowed key gives 0
  for (int d = 0; d < int(HEAD_DIM); ++d) STORE(out_, qrow(b, i, h) + d, acc[d] * inv);
  lse[(b * pc.heads + h) * pc.seq_q + i] = l > 0.0 ? m + log(l) : NEG_INF;
#else
  for (int d = 0; d < int(HEAD_DIM); ++d) STORE(dq, qrow(b, i, h) + d, acc[d]);
#endif
}

#elif PASS == BSA_DKDV
layout(binding = 0) readonly buffer Q { ELEM q[]; };
layout(binding = 1) readonly buffer K { ELEM k[]; };
layout(binding = 2) readonly buffer V { ELEM v[]; };
layout(binding = 3) readonly buffer Out { ELEM out_[]; };
layout(binding = 4) readonly buffer DOut { ELEM dout[]; };
layout(binding = 5) readonly buffer Lse { float lse[]; };
layout(binding = 6) readonly buffer QCounts { int qcounts[]; };
layout(binding = 7) readonly buffer QIndices { int qindices[]; };
layout(binding = 8) readonly buffer QSeg { int qseg[]; };
layout(binding = 9) readonly buffer KSeg { int kseg[]; };
layout(binding = 10) writeonly buffer DK { ELEM dk[]; };
layout(binding = 11) writeonly buffer DV { ELEM dv[]; };

shared float qs[BLOCK_M * HEAD_DIM];
shared float gs[BLOCK_M * HEAD_DIM];
shared float ls[BLOCK_M];
shared float dl[BLOCK_M];
shared int qsg[BLOCK_M];

// One group of BLOCK_N invocations per (key tile, kv head, batch), a key row each; for every
// head of the group and every live query block of the tile's key block (the transposed lists),
// tiles of BLOCK_M queries staged in shared memory. The group's heads are summed in registers.
void main() {
  const int lid = int(gl_LocalInvocationID.x), hk = int(gl_WorkGroupID.y), b = int(gl_WorkGroupID.z);
  const int j0 = int(gl_WorkGroupID.x * BLOCK_N), j = j0 + lid, group = pc.heads / pc.kv_heads;
  const int dd = pc.seq_k - pc.seq_q;
  const bool valid = j < pc.seq_k;
  float kr[HEAD_DIM], vr[HEAD_DIM], dka[HEAD_DIM], dva[HEAD_DIM];
  for (int d = 0; d < int(HEAD_DIM); ++d) {
    const int x = krow(b, valid ? j : 0, hk) + d;
    kr[d] = valid ? LOAD(k, x) : 0.0;
    vr[d] = valid ? LOAD(v, x) : 0.0;
    dka[d] = 0.0;
    dva[d] = 0.0;
  }
  const int ksg = HAS(F_SEGMENTS) && valid ? kseg[b * pc.seq_k + j] : 0;
  const int bj = j0 / pc.block_k;
  for (int h = hk * group; h < (hk + 1) * group; ++h) {
    const int row = list_row(b, h, pc.nbk, bj), cnt = qcounts[row];
    for (int e = 0; e < cnt; ++e) {
      const int bi = qindices[row * pc.nbq + e], iend = min(pc.seq_q, (bi + 1) * pc.block_q);
      // Query tiles wholly above the causal diagonal (last row before j0 - dd) are skipped by
      // starting after them.
      int istart = bi * pc.block_q;
      if (HAS(F_CAUSAL)) istart += max(0, j0 - dd - istart) / int(BLOCK_M) * int(BLOCK_M);
      for (int i0 = istart; i0 < iend; i0 += int(BLOCK_M)) {
        const int m = min(int(BLOCK_M), iend - i0);
        barrier();
        for (int x = lid; x < m * int(HEAD_DIM); x += int(BLOCK_N)) {
          const int r = x / int(HEAD_DIM), d = x - r * int(HEAD_DIM), idx = qrow(b, i0 + r, h) + d;
          qs[x] = LOAD(q, idx) * pc.scale;
          gs[x] = LOAD(dout, idx);
        }
        for (int r = lid; r < m; r += int(BLOCK_N)) {
          const int base = qrow(b, i0 + r, h);
          float D = 0.0;
          for (int d = 0; d < int(HEAD_DIM); ++d) D = fma(LOAD(dout, base + d), LOAD(out_, base + d), D);
          dl[r] = D;
          ls[r] = lse[(b * pc.heads + h) * pc.seq_q + i0 + r];
          if (HAS(F_SEGMENTS)) qsg[r] = qseg[b * pc.seq_q + i0 + r];
        }
        barrier();
        if (valid) {
          for (int r = 0; r < m; ++r) {
            const int i = i0 + r;
            const float L = ls[r];
            if (L == NEG_INF || (HAS(F_CAUSAL) && j > i + dd) || (HAS(F_SEGMENTS) && qsg[r] != ksg)) continue;
            float dot = 0.0, dp = 0.0;
            for (int d = 0; d < int(HEAD_DIM); ++d) {
              dot = fma(qs[r * int(HEAD_DIM) + d], kr[d], dot);
              dp = fma(gs[r * int(HEAD_DIM) + d], vr[d], dp);
            }
            const float z = cap_logit(dot);
            const float p = exp(z - L);
            const float ds = p * (dp - dl[r]) * cap_slope(z);  // times scale: q is staged scaled
            for (int d = 0; d < int(HEAD_DIM); ++d) {
              dva[d] = fma(p, gs[r * int(HEAD_DIM) + d], dva[d]);
              dka[d] = fma(ds, qs[r * int(HEAD_DIM) + d], dka[d]);
            }
          }
        }
      }
    }
  }
  if (!valid) return;
  for (int d = 0; d < int(HEAD_DIM); ++d) {
    STORE(dk, krow(b, j, hk) + d, dka[d]);
    STORE(dv, krow(b, j, hk) + d, dva[d]);
  }
}
#endif
