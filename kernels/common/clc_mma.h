/* NVIDIA tensor cores, warp shuffles, ldmatrix and cp.async from OpenCL C through inline PTX (sm_80
   and later), for the OpenCL C kernels' `mma` variants. NVIDIA's OpenCL (C 1.2) has no subgroups,
   so the warp's shuffles are PTX too. Its `__local` pointers hold shared-window addresses (the
   compiler places `__local` data in `.shared` and addresses it with `ld.shared`), so PTX that takes
   a shared address takes one as it is; but a `__local` array is only aligned to its element
   type, and ldmatrix rows and cp.async targets must be 16-byte aligned: declare such arrays
   `EJK_ALIGN16` (a misaligned address faults the kernel). Operands are f16 or bf16 (BF16, a -D
   option: 0 or 1) with f32 accumulation. Include after common/clc.h. */
#ifndef EJK_COMMON_CLC_MMA_H
#define EJK_COMMON_CLC_MMA_H

#ifndef BF16
#error "common/clc_mma.h needs BF16 (0: f16 operands, 1: bf16)"
#endif
#if BF16
#define MMA_TYPE "bf16"
#else
#define MMA_TYPE "f16"
#endif

/* c += a b for one m16n8k16 tile: a the row-major 16x16 A fragment, b the column-major 16x8 B
   fragment, c the f32 accumulators. Thread (g, t) = (lane / 4, lane % 4) holds rows g and g + 8,
   columns 2t and 2t + 1 of c. */
void mma(float* c, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." MMA_TYPE "." MMA_TYPE ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

float shfl_xor(float x, int m) {
  float y;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(y) : "f"(x), "r"(m));
  return y;
}

// Whether x holds in any thread of the warp.
bool warp_any(bool x) {
  uint r;
  asm volatile("{ .reg .pred p, q; setp.ne.u32 p, %1, 0; vote.sync.any.pred q, p, 0xffffffff; selp.u32 %0, 1, 0, q; }"
               : "=r"(r) : "r"((uint)x));
  return r != 0u;
}

// Two floats as one operand word, lo in the low half, rounded to nearest even.
uint pack2(float lo, float hi) {
  uint r;
  asm("cvt.rn." MMA_TYPE "x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// 2^x to about 2 ulp, subnormal results flushed: the hardware instruction itself.
float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Over the four threads of a quad (the threads sharing g: one row of an accumulator tile).
float max_quad(float x) {
  x = fmax(x, shfl_xor(x, 1));
  return fmax(x, shfl_xor(x, 2));
}
float sum_quad(float x) {
  x += shfl_xor(x, 1);
  return x + shfl_xor(x, 2);
}

// Local data that ldmatrix reads or cp.async writes.
#define EJK_ALIGN16 __attribute__((aligned(16)))

// The shared-window address of a __local pointer, as ldmatrix and cp.async take it. The CUDA
// backend's translation (NVRTC) makes __local pointers generic ones, which need converting.
#ifdef __CUDACC__
#define EJK_SMEM(p) ((uint)__cvta_generic_to_shared(p))
#else
#define EJK_SMEM(p) ((uint)(ulong)(p))
#endif

// Four 8x8 matrices of 16-bit words: lanes 8i..8i+7 give the rows of matrix i; lane l receives
// row l / 4, words l % 4 of each (r[i] from matrix i). _t: each matrix transposed.
void ldsm_x4(uint* r, uint addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
void ldsm_x4_t(uint* r, uint addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
void ldsm_x2(uint* r, uint addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}
void ldsm_x2_t(uint* r, uint addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}

// 16 bytes from global memory to local memory without passing through registers; `bytes` (0 to
// 16) of them read, the rest zero-filled. Bypasses L1 (.cg): tiles are read once per workgroup.
void cp16(uint dst, __global const void* src, uint bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"((ulong)src), "r"(bytes) : "memory");
}
// *p += x in global memory, atomically, without a result (red): sums that many threads meet in.
void red_add(__global float* p, float x) {
  asm volatile("red.global.add.f32 [%0], %1;" ::"l"((ulong)p), "f"(x) : "memory");
}

// p[0..3] += x, y, z, w (p 16-byte aligned), one red of four lanes: sm_90 on.
void red_add4(__global float* p, float x, float y, float z, float w) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"((ulong)p), "f"(x), "f"(y), "f"(z), "f"(w) : "memory");
}

// Four bytes (zero-filled past `bytes`), through L1: scattered words such as per-row statistics.
void cp4(uint dst, __global const void* src, uint bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"((ulong)src), "r"(bytes) : "memory");
}
void cp_commit(void) { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most N of this thread's committed groups are pending (N a constant expression).
#define CP_WAIT(N) asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory")

#endif
