// What the CUDA C++ kernels share: 16-bit storage (f16 or bf16 by the build option BF16, whose
// PTX type name is EJK_ELEM), conversions, fast exponentials, cp.async, ldmatrix and the sm_80
// tensor-core instructions (mma.sync m16n8k16 on 16-bit operands and m16n8k8 on TF32, both with
// f32 accumulation) and the online softmax's rescale of its accumulators.
#pragma once

#if BF16
#define EJK_ELEM "bf16"
#else
#define EJK_ELEM "f16"
#endif

typedef unsigned short elem_t;  // f16 or bf16 bits
#define NEG_INF __int_as_float(0xff800000)

// ceil(a / b), and a rounded up to a multiple of b, for a >= 0 and b > 0.
__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }
__host__ __device__ constexpr int round_up(int a, int b) { return ceil_div(a, b) * b; }

__device__ __forceinline__ unsigned shared_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ float f16_to_f32(unsigned short x) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
  return f;
}
__device__ __forceinline__ float bf16_to_f32(unsigned short x) { return __uint_as_float(static_cast<unsigned>(x) << 16); }
__device__ __forceinline__ float to_f32(elem_t x) {
#if BF16
  return bf16_to_f32(x);
#else
  return f16_to_f32(x);
#endif
}
// Element i of an array whose dtype is known only at run time (0 f32, 1 f16, 2 bf16).
__device__ __forceinline__ float load_any(const void* base, int dtype, int i) {
  if (dtype == 0) return static_cast<const float*>(base)[i];
  const unsigned short x = static_cast<const unsigned short*>(base)[i];
  return dtype == 2 ? bf16_to_f32(x) : f16_to_f32(x);
}
// Two values as a pair of 16-bit words, rounded to nearest even.
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
  unsigned r;
  asm("cvt.rn." EJK_ELEM "x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ elem_t to_elem(float x) { return static_cast<elem_t>(pack2(x, 0.0f) & 0xffffu); }

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float fast_tanh(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 16 bytes from global to shared; `bytes` (0..16) of them read, the rest zeros.
__device__ __forceinline__ void cp16(void* dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_addr(dst)), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// A kernel launched early (CudaTarget::launch_cuda's Launch::early) waits here until the
// stream's previous kernel has finished and its writes are visible; a kernel calls start_next()
// once its blocks no longer need the next kernel to stay out. Both are no-ops before sm_90 and
// in a kernel launched in order.
__device__ __forceinline__ void wait_previous() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void start_next() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void ldsm_x2(unsigned (&r)[2], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(shared_addr(p)));
}
__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_addr(p)));
}

// The online softmax's rescale of m16n8 accumulator tiles: this thread's elements of row g (0,
// 1) by a0, of row g + 8 (2, 3) by a1.
template <int N>
__device__ __forceinline__ void scale_rows(float (&acc)[N][4], float a0, float a1) {
#pragma unroll
  for (int j = 0; j < N; ++j) {
    acc[j][0] *= a0;
    acc[j][1] *= a0;
    acc[j][2] *= a1;
    acc[j][3] *= a1;
  }
}

// out = v (+ beta * out), one element or a pair of neighbours, in the output's type
// (16-bit storage or f32): a GEMM's store of C.
__device__ __forceinline__ void put1(elem_t* out, float v, float beta) {
  if (beta != 0.0f) v += beta * to_f32(*out);
  *out = to_elem(v);
}
__device__ __forceinline__ void put1(float* out, float v, float beta) { *out = beta != 0.0f ? v + beta * *out : v; }
__device__ __forceinline__ void put2(elem_t* out, float v0, float v1, float beta) {
  if (beta != 0.0f) {
    const unsigned old = *reinterpret_cast<const unsigned*>(out);
    v0 += beta * to_f32(static_cast<elem_t>(old & 0xffffu));
    v1 += beta * to_f32(static_cast<elem_t>(old >> 16));
  }
  *reinterpret_cast<unsigned*>(out) = pack2(v0, v1);
}
__device__ __forceinline__ void put2(float* out, float v0, float v1, float beta) {
  if (beta != 0.0f) {
    const float2 old = *reinterpret_cast<const float2*>(out);
    v0 += beta * old.x;
    v1 += beta * old.y;
  }
  *reinterpret_cast<float2*>(out) = make_float2(v0, v1);
}

// d += a b for a 16 x 16 A fragment and a 16 x 8 B fragment (b0, b1).
__device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." EJK_ELEM "." EJK_ELEM
               ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// f32 to TF32 (10-bit mantissa), to nearest with ties away from zero: the tf32 mma would
// otherwise drop the low 13 bits, a truncation biased toward zero.
__device__ __forceinline__ unsigned to_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

// d += a b for a 16 x 8 TF32 A fragment and an 8 x 8 B fragment (b0, b1).
__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
