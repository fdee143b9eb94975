/* NVIDIA tensor cores and warp shuffles from OpenCL C through inline PTX (sm_80 and later), for
   the OpenCL C kernels' `mma` variants. NVIDIA's OpenCL (C 1.2) has no subgroups, so the warp's
   shuffles are PTX too; `ldmatrix` and `cp.async` are not used: they need addresses in the shared
   window, which OpenCL's local pointers do not give. Operands are f16 or bf16 (BF16, a -D
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

#endif
