// block_sparse_attention on OpenCL C 1.2: the forward and the two backward passes of one
// program (see opencl.cpp for the plan; semantics in block_sparse_attention.hpp).
//
// Compile-time (-D): BLOCK_M (queries per tile), BLOCK_N (keys per tile), HEAD_DIM. Everything
// else is in Params, the storage dtype included (0 f32, 1 f16, 2 bf16), so one program serves
// every dtype and shape of a head_dim. Storage goes through common/clc.h; all arithmetic is
// f32.

#define F_CAUSAL 1u
#define F_SEGMENTS 2u
#define F_SOFTCAP 4u
#define HAS(f) ((P.flags & (f)) != 0u)

// Mirrors the host's Params (opencl.cpp): every member 4 bytes.
typedef struct {
  int batch, seq_q, seq_k, heads;
  int kv_heads, block_q, block_k, nbq;
  int nbk, lb, lh;
  uint flags, dtype;
  float scale, cap;
} Params;

#include "common/clc.h"

// Row of the block lists for (b, h, block) (lists broadcast over batch and heads when 1).
int list_row(const Params P, int b, int h, int blocks, int block) {
  return ((P.lb == 1 ? 0 : b) * P.lh + (P.lh == 1 ? 0 : h)) * blocks + block;
}

// The capped logit from u = scale * q.k (tanh from exp so that its accuracy does not depend on
// the driver's tanh).
float cap_logit(const Params P, float u) {
  if (!HAS(F_SOFTCAP)) return u;
  const float e = exp(-2.0f * fabs(u / P.cap));
  const float th = (1.0f - e) / (1.0f + e);
  return P.cap * (u < 0.0f ? -th : th);
}

// dz/du of the cap, from z.
float cap_slope(const Params P, float z) {
  if (!HAS(F_SOFTCAP)) return 1.0f;
  const float t = z / P.cap;
  return 1.0f - t * t;
}

int krow(const Params P, int b, int j, int hk) { return ((b * P.seq_k + j) * P.kv_heads + hk) * HEAD_DIM; }
int qrow(const Params P, int b, int i, int h) { return ((b * P.seq_q + i) * P.heads + h) * HEAD_DIM; }

// Stages n rows of k and v (or of any two [.., kv_heads, D] arrays) from row j0 into local memory.
void stage_keys(const Params P, __global const ushort* k, __global const ushort* v, __global const int* kseg, int b,
                int j0, int n, int hk, int lid, int threads, __local float* ks, __local float* vs, __local int* ksg) {
  for (int x = lid; x < n * HEAD_DIM; x += threads) {
    const int r = x / HEAD_DIM, d = x - r * HEAD_DIM, idx = krow(P, b, j0 + r, hk) + d;
    ks[x] = ejk_load(k, idx, P.dtype);
    vs[x] = ejk_load(v, idx, P.dtype);
  }
  if (HAS(F_SEGMENTS))
    for (int x = lid; x < n; x += threads) ksg[x] = kseg[b * P.seq_k + j0 + x];
}

// One query row's online-softmax update over a staged tile of n keys from j0.
void fwd_row(const Params P, const float* qr, __local const float* ks, __local const float* vs,
             __local const int* ksg, int n, int i, int j0, int qsg, float* acc, float* m, float* l) {
  const int dd = P.seq_k - P.seq_q;
  float s[BLOCK_N];
  float top = *m;
  for (int c = 0; c < n; ++c) {
    const int j = j0 + c;
    s[c] = -INFINITY;
    if ((HAS(F_CAUSAL) && j > i + dd) || (HAS(F_SEGMENTS) && ksg[c] != qsg)) continue;
    float dot = 0.0f;
    for (int d = 0; d < HEAD_DIM; ++d) dot = mad(qr[d], ks[c * HEAD_DIM + d], dot);
    s[c] = cap_logit(P, dot);
    top = fmax(top, s[c]);
  }
  if (top == -INFINITY) return;  // nothing allowed in this row yet
  const float alpha = exp(*m - top);
  float sum = 0.0f;
  for (int c = 0; c < n; ++c) {
    s[c] = s[c] == -INFINITY ? 0.0f : exp(s[c] - top);
    sum += s[c];
  }
  *l = *l * alpha + sum;
  *m = top;
  for (int d = 0; d < HEAD_DIM; ++d) {
    float a = acc[d] * alpha;
    for (int c = 0; c < n; ++c) a = mad(s[c], vs[c * HEAD_DIM + d], a);
    acc[d] = a;
  }
}

// One group of BLOCK_M work-items per (query tile, head, batch), a query row each: for every
// live key block of the tile's query block, tiles of BLOCK_N keys staged in local memory, then
// scores, online softmax and accumulation in registers. Control flow around the barriers is
// uniform over the group (CPU drivers such as PoCL rely on it): per-row work sits inside ifs.
__kernel __attribute__((reqd_work_group_size(BLOCK_M, 1, 1))) void bsa_fwd(
    const Params P, __global const ushort* q, __global const ushort* k, __global const ushort* v,
    __global const int* counts, __global const int* indices, __global const int* qseg, __global const int* kseg,
    __global ushort* out, __global float* lse) {
  const int lid = get_local_id(0), h = get_group_id(1), b = get_group_id(2);
  const int i0 = get_group_id(0) * BLOCK_M, i = i0 + lid, hk = h / (P.heads / P.kv_heads);
  const int dd = P.seq_k - P.seq_q, i_last = min(i0 + BLOCK_M, P.seq_q) - 1;
  const bool valid = i < P.seq_q;
  __local float ks[BLOCK_N * HEAD_DIM], vs[BLOCK_N * HEAD_DIM];
  __local int ksg[BLOCK_N];
  float qr[HEAD_DIM], acc[HEAD_DIM];
  for (int d = 0; d < HEAD_DIM; ++d) {
    qr[d] = valid ? ejk_load(q, qrow(P, b, i, h) + d, P.dtype) * P.scale : 0.0f;
    acc[d] = 0.0f;
  }
  const int qsg = HAS(F_SEGMENTS) && valid ? qseg[b * P.seq_q + i] : 0;
  float m = -INFINITY, l = 0.0f;
  const int row = list_row(P, b, h, P.nbq, i0 / P.block_q), cnt = counts[row];
  for (int e = 0; e < cnt; ++e) {
    const int bj = indices[row * P.nbk + e], jend = min(P.seq_k, (bj + 1) * P.block_k);
    // Key tiles wholly above the causal diagonal end the loop early.
    const int jstop = HAS(F_CAUSAL) ? min(jend, i_last + dd + 1) : jend;
    for (int j0 = bj * P.block_k; j0 < jstop; j0 += BLOCK_N) {
      const int n = min(BLOCK_N, jend - j0);
      barrier(CLK_LOCAL_MEM_FENCE);
      stage_keys(P, k, v, kseg, b, j0, n, hk, lid, BLOCK_M, ks, vs, ksg);
      barrier(CLK_LOCAL_MEM_FENCE);
      if (valid) fwd_row(P, qr, ks, vs, ksg, n, i, j0, qsg, acc, &m, &l);
    }
  }
  if (!valid) return;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;  // a row with no allowed key gives 0
  for (int d = 0; d < HEAD_DIM; ++d) ejk_store(out, qrow(P, b, i, h) + d, P.dtype, acc[d] * inv);
  lse[(b * P.heads + h) * P.seq_q + i] = l > 0.0f ? m + log(l) : -INFINITY;
}

// dq of one query row over a staged tile of n keys from j0: dq += scale * dz * k with
// dz = P (dP - D) through the cap's slope, P = exp(z - L).
void dq_row(const Params P, const float* qr, const float* g, __local const float* ks, __local const float* vs,
            __local const int* ksg, int n, int i, int j0, int qsg, float L, float D, float* acc) {
  const int dd = P.seq_k - P.seq_q;
  for (int c = 0; c < n; ++c) {
    const int j = j0 + c;
    if ((HAS(F_CAUSAL) && j > i + dd) || (HAS(F_SEGMENTS) && ksg[c] != qsg)) continue;
    float dot = 0.0f, dp = 0.0f;
    for (int d = 0; d < HEAD_DIM; ++d) {
      dot = mad(qr[d], ks[c * HEAD_DIM + d], dot);
      dp = mad(g[d], vs[c * HEAD_DIM + d], dp);
    }
    const float z = cap_logit(P, dot);
    const float ds = exp(z - L) * (dp - D) * cap_slope(P, z) * P.scale;
    for (int d = 0; d < HEAD_DIM; ++d) acc[d] = mad(ds, ks[c * HEAD_DIM + d], acc[d]);
  }
}

// dk, dv of one key row j over a staged tile of m queries from i0 (q staged times the scale,
// so dk needs no further scaling).
void dkdv_row(const Params P, const float* kr, const float* vr, __local const float* qs, __local const float* gs,
              __local const float* ls, __local const float* dl, __local const int* qsg, int m, int i0, int j, int ksg,
              float* dka, float* dva) {
  const int dd = P.seq_k - P.seq_q;
  for (int r = 0; r < m; ++r) {
    const int i = i0 + r;
    const float L = ls[r];
    if (L == -INFINITY || (HAS(F_CAUSAL) && j > i + dd) || (HAS(F_SEGMENTS) && qsg[r] != ksg)) continue;
    float dot = 0.0f, dp = 0.0f;
    for (int d = 0; d < HEAD_DIM; ++d) {
      dot = mad(qs[r * HEAD_DIM + d], kr[d], dot);
      dp = mad(gs[r * HEAD_DIM + d], vr[d], dp);
    }
    const float z = cap_logit(P, dot);
    const float p = exp(z - L);
    const float ds = p * (dp - dl[r]) * cap_slope(P, z);
    for (int d = 0; d < HEAD_DIM; ++d) {
      dva[d] = mad(p, gs[r * HEAD_DIM + d], dva[d]);
      dka[d] = mad(ds, qs[r * HEAD_DIM + d], dka[d]);
    }
  }
}

// dq: the forward's tiles again, with P = exp(z - lse) and dz = P (dP - D) (D = dout.out).
__kernel __attribute__((reqd_work_group_size(BLOCK_M, 1, 1))) void bsa_dq(
    const Params P, __global const ushort* q, __global const ushort* k, __global const ushort* v,
    __global const ushort* out, __global const ushort* dout, __global const float* lse, __global const int* counts,
    __global const int* indices, __global const int* qseg, __global const int* kseg, __global ushort* dq) {
  const int lid = get_local_id(0), h = get_group_id(1), b = get_group_id(2);
  const int i0 = get_group_id(0) * BLOCK_M, i = i0 + lid, hk = h / (P.heads / P.kv_heads);
  const int dd = P.seq_k - P.seq_q, i_last = min(i0 + BLOCK_M, P.seq_q) - 1;
  const bool valid = i < P.seq_q;
  __local float ks[BLOCK_N * HEAD_DIM], vs[BLOCK_N * HEAD_DIM];
  __local int ksg[BLOCK_N];
  float qr[HEAD_DIM], g[HEAD_DIM], acc[HEAD_DIM];
  float D = 0.0f;
  for (int d = 0; d < HEAD_DIM; ++d) {
    const int x = qrow(P, b, valid ? i : 0, h) + d;
    qr[d] = valid ? ejk_load(q, x, P.dtype) * P.scale : 0.0f;
    g[d] = valid ? ejk_load(dout, x, P.dtype) : 0.0f;
    D = mad(g[d], valid ? ejk_load(out, x, P.dtype) : 0.0f, D);
    acc[d] = 0.0f;
  }
  const float L = valid ? lse[(b * P.heads + h) * P.seq_q + i] : -INFINITY;
  const int qsg = HAS(F_SEGMENTS) && valid ? qseg[b * P.seq_q + i] : 0;
  const int row = list_row(P, b, h, P.nbq, i0 / P.block_q), cnt = counts[row];
  for (int e = 0; e < cnt; ++e) {
    const int bj = indices[row * P.nbk + e], jend = min(P.seq_k, (bj + 1) * P.block_k);
    const int jstop = HAS(F_CAUSAL) ? min(jend, i_last + dd + 1) : jend;
    for (int j0 = bj * P.block_k; j0 < jstop; j0 += BLOCK_N) {
      const int n = min(BLOCK_N, jend - j0);
      barrier(CLK_LOCAL_MEM_FENCE);
      stage_keys(P, k, v, kseg, b, j0, n, hk, lid, BLOCK_M, ks, vs, ksg);
      barrier(CLK_LOCAL_MEM_FENCE);
      // A row with no allowed key (and a row past the sequence) has lse -inf: zero gradient.
      if (L != -INFINITY) dq_row(P, qr, g, ks, vs, ksg, n, i, j0, qsg, L, D, acc);
    }
  }
  if (!valid) return;
  for (int d = 0; d < HEAD_DIM; ++d) ejk_store(dq, qrow(P, b, i, h) + d, P.dtype, acc[d]);
}

// dk, dv: one group of BLOCK_N work-items per (key tile, kv head, batch), a key row each; for
// every head of the group and every live query block of the tile's key block (the transposed
// lists), tiles of BLOCK_M queries (q, dout, lse, D) staged in local memory. The group's heads
// are summed in registers, so nothing is written twice.
__kernel __attribute__((reqd_work_group_size(BLOCK_N, 1, 1))) void bsa_dkdv(
    const Params P, __global const ushort* q, __global const ushort* k, __global const ushort* v,
    __global const ushort* out, __global const ushort* dout, __global const float* lse, __global const int* qcounts,
    __global const int* qindices, __global const int* qseg, __global const int* kseg, __global ushort* dk,
    __global ushort* dv) {
  const int lid = get_local_id(0), hk = get_group_id(1), b = get_group_id(2);
  const int j0 = get_group_id(0) * BLOCK_N, j = j0 + lid, group = P.heads / P.kv_heads;
  const int dd = P.seq_k - P.seq_q;
  const bool valid = j < P.seq_k;
  __local float qs[BLOCK_M * HEAD_DIM], gs[BLOCK_M * HEAD_DIM], ls[BLOCK_M], dl[BLOCK_M];
  __local int qsg[BLOCK_M];
  float kr[HEAD_DIM], vr[HEAD_DIM], dka[HEAD_DIM], dva[HEAD_DIM];
  for (int d = 0; d < HEAD_DIM; ++d) {
    const int x = krow(P, b, valid ? j : 0, hk) + d;
    kr[d] = valid ? ejk_load(k, x, P.dtype) : 0.0f;
    vr[d] = valid ? ejk_load(v, x, P.dtype) : 0.0f;
    dka[d] = 0.0f;
    dva[d] = 0.0f;
  }
  const int ksg = HAS(F_SEGMENTS) && valid ? kseg[b * P.seq_k + j] : 0;
  const int bj = j0 / P.block_k;
  for (int h = hk * group; h < (hk + 1) * group; ++h) {
    const int row = list_row(P, b, h, P.nbk, bj), cnt = qcounts[row];
    for (int e = 0; e < cnt; ++e) {
      const int bi = qindices[row * P.nbq + e], iend = min(P.seq_q, (bi + 1) * P.block_q);
      // Query tiles wholly above the causal diagonal (last row before j0 - dd) are skipped by
      // starting after them.
      int istart = bi * P.block_q;
      if (HAS(F_CAUSAL)) istart += max(0, j0 - dd - istart) / BLOCK_M * BLOCK_M;
      for (int i0 = istart; i0 < iend; i0 += BLOCK_M) {
        const int m = min(BLOCK_M, iend - i0);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int x = lid; x < m * HEAD_DIM; x += BLOCK_N) {
          const int r = x / HEAD_DIM, d = x - r * HEAD_DIM, idx = qrow(P, b, i0 + r, h) + d;
          qs[x] = ejk_load(q, idx, P.dtype) * P.scale;
          gs[x] = ejk_load(dout, idx, P.dtype);
        }
        for (int r = lid; r < m; r += BLOCK_N) {
          const int base = qrow(P, b, i0 + r, h);
          float D = 0.0f;
          for (int d = 0; d < HEAD_DIM; ++d) D = mad(ejk_load(dout, base + d, P.dtype), ejk_load(out, base + d, P.dtype), D);
          dl[r] = D;
          ls[r] = lse[(b * P.heads + h) * P.seq_q + i0 + r];
          if (HAS(F_SEGMENTS)) qsg[r] = qseg[b * P.seq_q + i0 + r];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (valid) dkdv_row(P, kr, vr, qs, gs, ls, dl, qsg, m, i0, j, ksg, dka, dva);
      }
    }
  }
  if (!valid) return;
  for (int d = 0; d < HEAD_DIM; ++d) {
    ejk_store(dk, krow(P, b, j, hk) + d, P.dtype, dka[d]);
    ejk_store(dv, krow(P, b, j, hk) + d, P.dtype, dva[d]);
  }
}
