// attention_merge on OpenCL C 1.2 (see opencl.cpp for the plan, attention_merge.hpp for the
// semantics).
//
// Compile-time (-D): THREADS (work-items per group), VEC (contiguous elements per work-item,
// loaded and stored as one vector: 1, 2 or 4), OUT_T and PART_T (out's and part's dtype: 0 f32,
// 1 f16, 2 bf16). Sizes are kernel arguments, so one program serves every shape. Storage is read
// and written through vload(_half)n / vstore(_half)n: no cl_khr_fp16 is needed, and all
// arithmetic is f32.

#define CAT(a, b) a##b
#define XCAT(a, b) CAT(a, b)

#if VEC == 1
#define VF float
#define VU uint
#define LOADV(p, e) ((p)[e])
#define STOREV(x, p, e) ((p)[e] = (x))
#define LOADH(p, e) vload_half((e), (p))
#define STOREH(x, p, e) vstore_half_rte((x), (e), (p))
#define TO_UINT(u) ((uint)(u))
#define TO_USHORT(u) ((ushort)(u))
#define AS_F(u) as_float(u)
#define AS_U(x) as_uint(x)
#else
#define VF XCAT(float, VEC)
#define VU XCAT(uint, VEC)
#define LOADV(p, e) XCAT(vload, VEC)(0, (p) + (e))
#define STOREV(x, p, e) XCAT(vstore, VEC)((x), 0, (p) + (e))
#define LOADH(p, e) XCAT(vload_half, VEC)(0, (p) + (e))
#define STOREH(x, p, e) XCAT(XCAT(vstore_half, VEC), _rte)((x), 0, (p) + (e))
#define TO_UINT(u) XCAT(convert_uint, VEC)(u)
#define TO_USHORT(u) XCAT(convert_ushort, VEC)(u)
#define AS_F(u) XCAT(as_float, VEC)(u)
#define AS_U(x) XCAT(as_uint, VEC)(x)
#endif

// bf16 is the high half of an f32: widened by a shift, narrowed rounding to nearest even (NaN
// kept a quiet NaN).
VF bf16_load(const __global ushort* p, int e) { return AS_F(TO_UINT(LOADV(p, e)) << 16); }
void bf16_store(VF x, __global ushort* p, int e) {
  const VU u = AS_U(x);
  const VU r = select((u + 0x7fffu + ((u >> 16) & 1u)) >> 16, (VU)(0x7fc0u), isnan(x));
  STOREV(TO_USHORT(r), p, e);
}

#define ELEM_0 float
#define ELEM_1 half
#define ELEM_2 ushort
#define LOAD_0(p, e) LOADV(p, e)
#define LOAD_1(p, e) LOADH(p, e)
#define LOAD_2(p, e) bf16_load(p, e)
#define STORE_0(x, p, e) STOREV(x, p, e)
#define STORE_1(x, p, e) STOREH(x, p, e)
#define STORE_2(x, p, e) bf16_store(x, p, e)

// Grid: one group per rows_per_group rows. Each row's weights are computed once into local
// memory (wa < 0: row left as it is; wa == 0: out not read; wc == 0: part not read), then the
// group's rows stream through VEC elements per work-item.
__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void attention_merge(
    __global XCAT(ELEM_, OUT_T) * out, __global float* lse, const __global XCAT(ELEM_, PART_T) * part,
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
      VF x = (VF)(0.f);
      if (wa != 0.f) x = XCAT(LOAD_, OUT_T)(out, e) * wa;
      if (wc != 0.f) x += XCAT(LOAD_, PART_T)(part, e) * wc;
      XCAT(STORE_, OUT_T)(x, out, e);
    }
    i += drow;
    col += dcol;
    if (col >= dim) col -= dim, ++i;
  }
}
