/* The OpenCL C prelude: what every kernel's OpenCL C shares, whichever backend compiles it (an
   OpenCL driver, or the CUDA backend through lib/src/backends/cuda/opencl_c_prelude.inc). Every
   .cl source includes it as "common/clc.h" and lists it in its implementation's sources()
   (clc::prelude_source), so an edit here changes every kernel's version. */
#ifndef EJK_COMMON_CLC_H
#define EJK_COMMON_CLC_H

#ifndef EJK_LOCAL_ARG
// A kernel's __local pointer argument (a clc::LocalBytes at launch). OpenCL passes the group's
// local memory; on CUDA the parameter is unused and EJK_LOCAL_BIND, the kernel's first line,
// binds the name to the block's dynamic shared memory. The CUDA prelude defines these first.
#define EJK_LOCAL_ARG(T, name) __local T* name
#define EJK_LOCAL_BIND(T, name)
#endif

#define EJK_CAT_(a, b) a##b
#define EJK_CAT(a, b) EJK_CAT_(a, b)

/* ceil(a / b), and a rounded up to a multiple of b, for a >= 0 and b > 0: macros, so that #if
   lines and constant expressions take them too. */
#define EJK_CEIL_DIV(a, b) (((a) + (b) - 1) / (b))
#define EJK_ROUND_UP(a, b) (EJK_CEIL_DIV(a, b) * (b))

/* ---- storage: how kernels read and write f32, f16 and bf16 arrays while doing all arithmetic
   in f32. Dtype codes are those of the host's Params and build options: 0 f32, 1 f16, 2 bf16.
   - f32 is read and written as is.
   - f16 goes through vload_half / vstore_half_rte (round to nearest even, subnormals kept), so
     no cl_khr_fp16 is needed: arrays are 16-bit words.
   - bf16 is the high half of an f32: widened by a shift (exact), narrowed rounding to nearest
     even, NaN becoming the quiet NaN 0x7fc0.
   matmul.cl keeps codecs of its own (a NaN keeps its sign and payload there, as in the host's
   f32_to_bf16): the shipped profiles/ are tuned for its exact text. */

/* The bf16 bits (in the low half) of the f32 bits u rounded to nearest even; u must not be a NaN,
   whose payload the carry could turn into an infinity or a zero. Scalars and vectors alike. */
#define EJK_BF16_RNE(u) (((u) + 0x7fffu + (((u) >> 16) & 1u)) >> 16)
#define EJK_BF16_NAN 0x7fc0u

float ejk_bf16_to_f32(ushort h) { return as_float((uint)h << 16); }

ushort ejk_f32_to_bf16(float x) {
  const uint u = as_uint(x);
  return isnan(x) ? (ushort)EJK_BF16_NAN : (ushort)EJK_BF16_RNE(u);
}

/* Vectors of W = 2, 4, 8 or 16 bf16: widened by a macro, so that it applies to a variable in place
   (a copy into a function argument can split the wide loads feeding it), and narrowed by
   ejk_f32_to_bf16_W. */
#define EJK_BF16_TO_F32V(W, h) EJK_CAT(as_float, W)(EJK_CAT(convert_uint, W)(h) << 16)
#define EJK_BF16_NARROW(W)                                                                   \
  EJK_CAT(ushort, W) EJK_CAT(ejk_f32_to_bf16_, W)(EJK_CAT(float, W) x) {                   \
    const EJK_CAT(uint, W) u = EJK_CAT(as_uint, W)(x);                                      \
    return EJK_CAT(convert_ushort, W)(select(EJK_BF16_RNE(u), (EJK_CAT(uint, W))(EJK_BF16_NAN), isnan(x))); \
  }
EJK_BF16_NARROW(2)
EJK_BF16_NARROW(4)
EJK_BF16_NARROW(8)
EJK_BF16_NARROW(16)

/* One storage dtype T fixed at build time (a -D option: 0, 1 or 2): the array element type, and
   element i of array p read as f32 / written from f32. */
#define EJK_ELEM_0 float
#define EJK_ELEM_1 half
#define EJK_ELEM_2 ushort
#define EJK_LD_0(p, i) ((p)[i])
#define EJK_LD_1(p, i) vload_half((i), (p))
#define EJK_LD_2(p, i) ejk_bf16_to_f32((p)[i])
#define EJK_ST_0(p, i, x) ((p)[i] = (x))
#define EJK_ST_1(p, i, x) vstore_half_rte((x), (i), (p))
#define EJK_ST_2(p, i, x) ((p)[i] = ejk_f32_to_bf16(x))
#define EJK_ELEM(T) EJK_CAT(EJK_ELEM_, T)
#define EJK_LD(T, p, i) EJK_CAT(EJK_LD_, T)(p, i)
#define EJK_ST(T, p, i, x) EJK_CAT(EJK_ST_, T)(p, i, x)

/* A kernel's VEC (a -D option: 1, 2 or 4) contiguous elements moved as one vector, so that wide
   loads and stores reach the memory system whatever the dtype: EJK_VF, the f32 vector they are
   computed in; EJK_VLOAD_t(p, e) / EJK_VSTORE_t(x, p, e), elements e .. e + VEC - 1 of dtype t's
   array p, e a multiple of VEC. */
#ifdef VEC
#if VEC == 1
#define EJK_VF float
#define EJK_VLOAD_0(p, e) EJK_LD_0(p, e)
#define EJK_VLOAD_1(p, e) EJK_LD_1(p, e)
#define EJK_VLOAD_2(p, e) EJK_LD_2(p, e)
#define EJK_VSTORE_0(x, p, e) EJK_ST_0(p, e, x)
#define EJK_VSTORE_1(x, p, e) EJK_ST_1(p, e, x)
#define EJK_VSTORE_2(x, p, e) EJK_ST_2(p, e, x)
#else
#define EJK_VF EJK_CAT(float, VEC)
#define EJK_VLOADV_(p, e) EJK_CAT(vload, VEC)(0, (p) + (e))
#define EJK_VSTOREV_(x, p, e) EJK_CAT(vstore, VEC)((x), 0, (p) + (e))
#define EJK_VLOAD_0(p, e) EJK_VLOADV_(p, e)
#define EJK_VLOAD_1(p, e) EJK_CAT(vload_half, VEC)(0, (p) + (e))
#define EJK_VLOAD_2(p, e) EJK_BF16_TO_F32V(VEC, EJK_VLOADV_(p, e))
#define EJK_VSTORE_0(x, p, e) EJK_VSTOREV_(x, p, e)
#define EJK_VSTORE_1(x, p, e) EJK_CAT(EJK_CAT(vstore_half, VEC), _rte)((x), 0, (p) + (e))
#define EJK_VSTORE_2(x, p, e) EJK_VSTOREV_(EJK_CAT(ejk_f32_to_bf16_, VEC)(x), p, e)
#endif
#define EJK_VLOAD(T, p, e) EJK_CAT(EJK_VLOAD_, T)(p, e)
#define EJK_VSTORE(T, x, p, e) EJK_CAT(EJK_VSTORE_, T)(x, p, e)
#endif

/* A storage dtype dt known only at run time (one program serving every dtype): element i of
   the array at p, whatever pointer type carries it. */
float ejk_load(const __global void* p, size_t i, uint dt) {
  if (dt == 0u) return ((const __global float*)p)[i];
  if (dt == 1u) return vload_half(i, (const __global half*)p);
  return ejk_bf16_to_f32(((const __global ushort*)p)[i]);
}

void ejk_store(__global void* p, size_t i, uint dt, float x) {
  if (dt == 0u) {
    ((__global float*)p)[i] = x;
  } else if (dt == 1u) {
    vstore_half_rte(x, i, (__global half*)p);
  } else {
    ((__global ushort*)p)[i] = ejk_f32_to_bf16(x);
  }
}

#endif
