// add on OpenCL C 1.2 (see space.hpp for the plan, add.hpp for the semantics).
//
// Compile-time (-D): THREADS (work-items per group), VEC (contiguous elements per work-item,
// loaded and stored as one vector: 1, 2 or 4), A_T, B_T and OUT_T (the arrays' dtypes: 0 f32,
// 1 f16, 2 bf16). numel and alpha are kernel arguments, so one program serves every size and
// alpha. Storage goes through common/clc.h's codecs; all arithmetic is f32. No restrict: out
// may be a or b (each element is read before it is written, by the same work-item).

#include "common/clc.h"

// Grid: one group per THREADS * VEC elements. Indices are 32-bit unsigned: the host refuses
// 2^31 - 1 elements or more, so e + VEC never wraps. alpha == 0 skips b altogether (0 * NaN
// would be NaN); the branch is uniform.
__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void add(
    const __global EJK_ELEM(A_T) * a, const __global EJK_ELEM(B_T) * b, __global EJK_ELEM(OUT_T) * out, uint n,
    float alpha) {
  const uint e = ((uint)get_group_id(0) * THREADS + (uint)get_local_id(0)) * VEC;
  if (e + VEC <= n) {
    EJK_VF x = EJK_VLOAD(A_T, a, e);
    if (alpha != 0.f) x += alpha * EJK_VLOAD(B_T, b, e);
    EJK_VSTORE(OUT_T, x, out, e);
  } else {
    // The last partial vector, element by element.
    for (uint i = e; i < n; ++i) {
      float x = EJK_LD(A_T, a, i);
      if (alpha != 0.f) x += alpha * EJK_LD(B_T, b, i);
      EJK_ST(OUT_T, out, i, x);
    }
  }
}
