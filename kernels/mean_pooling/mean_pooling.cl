// mean_pooling and mean_pooling_bwd on OpenCL C 1.2 (see opencl.cpp for the plan).
//
// Compile-time (-D): THREADS (work-items per group), VEC (columns per work-item), ROWS
// (work-items along the tokens of a group: THREADS / ROWS of them cover THREADS / ROWS * VEC
// columns), DTYPE (0 f32, 1 f16, 2 bf16). Everything else is a kernel argument. Storage is read
// and written through common/clc.h; all arithmetic is f32.

#define TX (THREADS / ROWS)  // work-items along the columns
#define CB (TX * VEC)        // columns of a group

#include "common/clc.h"
#define ELEM EJK_ELEM(DTYPE)
#define LD(p, i) EJK_LD(DTYPE, p, i)
#define ST(p, i, x) EJK_ST(DTYPE, p, i, x)

// Tokens [*a, *b) of sequence s: padded (packed == 0) or from the offsets, clamped to the token
// array so that unchecked bad offsets cannot reach outside it.
void bounds(const __global int* cu, int packed, int seq, int tokens, int s, int* a, int* b) {
  if (packed) {
    *a = clamp(cu[s], 0, tokens);
    *b = clamp(cu[s + 1], *a, tokens);
  } else {
    *a = s * seq;
    *b = *a + seq;
  }
}

// This group's part of its sequence: [*a, *b), and the sequence's length *len.
void part(const __global int* cu, int packed, int seq, int tokens, int s, int q, int splits, int* a, int* b, int* len) {
  int start, end;
  bounds(cu, packed, seq, tokens, s, &start, &end);
  const int chunk = EJK_CEIL_DIV(end - start, splits);
  *a = min(end, start + q * chunk);
  *b = min(end, *a + chunk);
  *len = end - start;
}

// Grid: (blocks of CB columns * sequences, parts). splits == 1: the mean goes to out; else each
// part's sum goes to partial [splits, segs, dim] and mean_pool_finish adds them.
__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void mean_pool(
    const __global ELEM* x, const __global int* cu, __global ELEM* out, __global float* partial, int packed, int seq,
    int tokens, int segs, int dim, int blocks, int splits) {
  const int lid = get_local_id(0), tx = lid % TX, ty = lid / TX;
  const int blk = get_group_id(0) % blocks, s = get_group_id(0) / blocks, q = get_group_id(1);
  int a, b, len;
  part(cu, packed, seq, tokens, s, q, splits, &a, &b, &len);
  const int c0 = blk * CB + tx * VEC;
  float acc[VEC];
  for (int v = 0; v < VEC; ++v) acc[v] = 0.f;
  if (c0 + VEC <= dim) {
    for (int t = a + ty; t < b; t += ROWS)
      for (int v = 0; v < VEC; ++v) acc[v] += LD(x, t * dim + c0 + v);
  } else {
    for (int t = a + ty; t < b; t += ROWS)
      for (int v = 0; v < VEC; ++v)
        if (c0 + v < dim) acc[v] += LD(x, t * dim + c0 + v);
  }
#if ROWS > 1
  // The ROWS partial sums of each column, halved until one is left.
  __local float red[THREADS * VEC];
  for (int v = 0; v < VEC; ++v) red[lid * VEC + v] = acc[v];
  for (int r = ROWS / 2; r > 0; r /= 2) {
    barrier(CLK_LOCAL_MEM_FENCE);
    if (ty < r)
      for (int v = 0; v < VEC; ++v) red[lid * VEC + v] += red[(lid + r * TX) * VEC + v];
  }
  if (ty != 0) return;
  for (int v = 0; v < VEC; ++v) acc[v] = red[lid * VEC + v];
#endif
  const float w = len > 0 ? 1.f / (float)len : 0.f;
  for (int v = 0; v < VEC; ++v) {
    const int c = c0 + v;
    if (c >= dim) break;
    if (splits == 1) ST(out, s * dim + c, acc[v] * w);
    else partial[(q * segs + s) * dim + c] = acc[v];
  }
}

// One work-item per (sequence, column): the parts' sums added and divided by the length.
__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void mean_pool_finish(
    const __global float* partial, const __global int* cu, __global ELEM* out, int packed, int seq, int tokens, int segs,
    int dim, int splits) {
  const int i = get_global_id(0);
  if (i >= segs * dim) return;
  const int s = i / dim;
  int a, b;
  bounds(cu, packed, seq, tokens, s, &a, &b);
  float acc = 0.f;
  for (int q = 0; q < splits; ++q) acc += partial[q * segs * dim + i];
  ST(out, i, b > a ? acc / (float)(b - a) : 0.f);
}

// Backward, the forward's grid: each group writes dout / len to its part's tokens.
__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void mean_pool_bwd(
    const __global ELEM* dout, const __global int* cu, __global ELEM* dx, int packed, int seq, int tokens, int segs,
    int dim, int blocks, int splits) {
  const int lid = get_local_id(0), tx = lid % TX, ty = lid / TX;
  const int blk = get_group_id(0) % blocks, s = get_group_id(0) / blocks, q = get_group_id(1);
  int a, b, len;
  part(cu, packed, seq, tokens, s, q, splits, &a, &b, &len);
  if (a >= b) return;
  const int c0 = blk * CB + tx * VEC;
  const float w = 1.f / (float)len;
  float g[VEC];
  for (int v = 0; v < VEC; ++v) g[v] = c0 + v < dim ? LD(dout, s * dim + c0 + v) * w : 0.f;
  if (c0 + VEC <= dim) {
    for (int t = a + ty; t < b; t += ROWS)
      for (int v = 0; v < VEC; ++v) ST(dx, t * dim + c0 + v, g[v]);
  } else {
    for (int t = a + ty; t < b; t += ROWS)
      for (int v = 0; v < VEC; ++v)
        if (c0 + v < dim) ST(dx, t * dim + c0 + v, g[v]);
  }
}
