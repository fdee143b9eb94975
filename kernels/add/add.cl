// add on OpenCL C 1.2 (see space.hpp for the plan, add.hpp for the semantics).
//
// Compile-time (-D): THREADS (work-items per group), VEC (contiguous elements per work-item,
// loaded and stored as one vector: 1, 2 or 4), A_T, B_T and OUT_T (the arrays' dtypes: 0 f32,
// 1 f16, 2 bf16). numel and alpha are kernel arguments, so one program serves every size and
// alpha. Storage goes through common/clc.h's codecs; all arithmetic is f32. No restrict: out
// may be a or b (each element is read before it is written, by the same work-item).

#include "common/clc.h"
#define XCAT(a, b) EJK_CAT(a, b)

// LOAD_t / STORE_t: VEC elements of storage dtype t at element e, as f32.
#if VEC == 1
#define VF float
#define LOAD_0(p, e) EJK_LD_0(p, e)
#define LOAD_1(p, e) EJK_LD_1(p, e)
#define LOAD_2(p, e) EJK_LD_2(p, e)
#define STORE_0(x, p, e) EJK_ST_0(p, e, x)
#define STORE_1(x, p, e) EJK_ST_1(p, e, x)
#define STORE_2(x, p, e) EJK_ST_2(p, e, x)
#else
#define VF XCAT(float, VEC)
#define LOADV(p, e) XCAT(vload, VEC)(0, (p) + (e))
#define STOREV(x, p, e) XCAT(vstore, VEC)((x), 0, (p) + (e))
#define LOAD_0(p, e) LOADV(p, e)
#define LOAD_1(p, e) XCAT(vload_half, VEC)(0, (p) + (e))
#define LOAD_2(p, e) EJK_BF16_TO_F32V(VEC, LOADV(p, e))
#define STORE_0(x, p, e) STOREV(x, p, e)
#define STORE_1(x, p, e) XCAT(XCAT(vstore_half, VEC), _rte)((x), 0, (p) + (e))
#define STORE_2(x, p, e) STOREV(XCAT(ejk_f32_to_bf16_, VEC)(x), p, e)
#endif

// Grid: one group per THREADS * VEC elements. Indices are 32-bit unsigned: the host refuses
// 2^31 - 1 elements or more, so e + VEC never wraps. alpha == 0 skips b altogether (0 * NaN
// would be NaN); the branch is uniform.
__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void add(
    const __global EJK_ELEM(A_T) * a, const __global EJK_ELEM(B_T) * b, __global EJK_ELEM(OUT_T) * out, uint n,
    float alpha) {
  const uint e = ((uint)get_group_id(0) * THREADS + (uint)get_local_id(0)) * VEC;
  if (e + VEC <= n) {
    VF x = XCAT(LOAD_, A_T)(a, e);
    if (alpha != 0.f) x += alpha * XCAT(LOAD_, B_T)(b, e);
    XCAT(STORE_, OUT_T)(x, out, e);
  } else {
    // The last partial vector, element by element.
    for (uint i = e; i < n; ++i) {
      float x = EJK_LD(A_T, a, i);
      if (alpha != 0.f) x += alpha * EJK_LD(B_T, b, i);
      EJK_ST(OUT_T, out, i, x);
    }
  }
}
