/* How one stored array differs from another (Device::difference; the element rule is
   compare_elements in lib/src/core/difference.cpp): each group reduces its share of the
   elements to the largest |got - want| and |want| where both are finite and the first bad
   element, and writes them to part[4 * group ...] as (err bits, scale bits, bad low, bad high),
   so only a few bytes a group come back. Without want (has_want 0), bad is the first element
   that is not finite. Values are compared in f32 (f16 and bf16 widen exactly). */
#include "clc.h"

#define GROUP 256

/* dtype 3 is i32; the others are clc.h's storage dtypes. */
float load(const __global uint* p, ulong e, uint dtype) {
  if (dtype == 3u) return (float)as_int(p[e]);
  return ejk_load(p, e, dtype);
}

__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1))) void ejk_difference(const __global uint* got,
                                                                                  const __global uint* want, ulong n,
                                                                                  uint dtype, uint has_want,
                                                                                  __global uint* part) {
  __local float lerr[GROUP], lscale[GROUP];
  __local ulong lbad[GROUP];
  float err = 0.0f, scale = 0.0f;
  ulong bad = n;
  for (ulong e = get_global_id(0); e < n; e += get_global_size(0)) {
    float g = load(got, e, dtype);
    if (has_want == 0u) {
      if (!isfinite(g) && e < bad) bad = e;
      continue;
    }
    float w = load(want, e, dtype);
    if (isinf(w) && g == w) continue;
    if (!isfinite(g) || isinf(w)) {
      if (e < bad) bad = e;
      continue;
    }
    /* A NaN want is ignored, as std::max ignores a NaN second argument on the host. */
    if (!isnan(w)) {
      err = fmax(err, fabs(g - w));
      scale = fmax(scale, fabs(w));
    }
  }
  uint l = get_local_id(0);
  lerr[l] = err;
  lscale[l] = scale;
  lbad[l] = bad;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint s = GROUP / 2; s > 0u; s >>= 1) {
    if (l < s) {
      lerr[l] = fmax(lerr[l], lerr[l + s]);
      lscale[l] = fmax(lscale[l], lscale[l + s]);
      lbad[l] = min(lbad[l], lbad[l + s]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (l == 0u) {
    uint g4 = 4u * (uint)get_group_id(0);
    part[g4] = as_uint(lerr[0]);
    part[g4 + 1u] = as_uint(lscale[0]);
    part[g4 + 2u] = (uint)lbad[0];
    part[g4 + 3u] = (uint)(lbad[0] >> 32);
  }
}
