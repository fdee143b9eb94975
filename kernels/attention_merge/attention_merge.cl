// attention_merge on OpenCL C 1.2 (see opencl.cpp for the plan, attention_merge.hpp for the
// semantics).
//
// Compile-time (-D): THREADS (work-items per group), VEC (contiguous elements per work-item,
// loaded and stored as one vector: 1, 2 or 4), OUT_T and PART_T (out's and part's dtype: 0 f32,
// 1 f16, 2 bf16). Sizes are kernel arguments, so one program serves every shape. Storage is read
// and written VEC elements at a time through common/clc.h's codecs; all arithmetic is f32.

#include "common/clc.h"

// Grid: one group per rows_per_group rows. Each row's weights are computed once into local
// memory (wa < 0: row left as it is; wa == 0: out not read; wc == 0: part not read), then the
// group's rows stream through VEC elements per work-item.
__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void attention_merge(
    __global EJK_ELEM(OUT_T) * out, __global float* lse, const __global EJK_ELEM(PART_T) * part,
    const __global float* part_lse, int rows, int seq, int heads, int dim, int rows_per_group) {
  __local float wa_l[THREADS * VEC], wc_l[THREADS * VEC];
  const int lid = get_local_id(0);
  const int r0 = get_group_id(0) * rows_per_group;
  const int nr = min(rows_per_group, rows - r0);
  for (int i = lid; i < nr; i += THREADS) {
    const int r = r0 + i, h = r % heads, bs = r / heads;
    const int li = (bs / seq * heads + h) * seq + bs % seq;
    const float a = lse[li], c = part_lse[li];
    float wa, wc;
    if (c == -INFINITY) {
      wa = a == -INFINITY ? 0.f : -1.f;
      wc = 0.f;
    } else if (a == -INFINITY) {
      wa = 0.f;
      wc = 1.f;
      lse[li] = c;
    } else {
      const float m = fmax(a, c) + log1p(exp(-fabs(a - c)));
      wa = exp(a - m);
      wc = exp(c - m);
      lse[li] = m;
    }
    wa_l[i] = wa;
    wc_l[i] = wc;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (dim == 0) return;
  // The work-item's row i and column col advance by a whole step per iteration: no division in
  // the loop.
  const int step = THREADS * VEC, drow = step / dim, dcol = step % dim, end = (r0 + nr) * dim;
  int i = lid * VEC / dim, col = lid * VEC % dim;
  for (int e = r0 * dim + lid * VEC; e < end; e += step) {
    const float wa = wa_l[i], wc = wc_l[i];
    if (wa >= 0.f) {
      EJK_VF x = (EJK_VF)(0.f);
      if (wa != 0.f) x = EJK_VLOAD(OUT_T, out, e) * wa;
      if (wc != 0.f) x += EJK_VLOAD(PART_T, part, e) * wc;
      EJK_VSTORE(OUT_T, x, out, e);
    }
    i += drow;
    col += dcol;
    if (col >= dim) col -= dim, ++i;
  }
}
