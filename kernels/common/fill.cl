/* Random inputs on the device: whole blocks of four elements of fill_uniform (lib/src/core/fill.cpp,
   the definition; the host writes the ragged end). Element e of a fill with seed S over [lo, hi):
     r = philox4x32_10((e / 4 mod 2^32, e / 4 / 2^32, 0x66696c6c, 0), (S mod 2^32, S / 2^32))
     u = (word e % 4 of r >> 8) * 2^-24,  x = (hi - lo) * u + lo in f32, two correctly rounded steps
   stored round-to-nearest-even in f16/bf16, as is in f32, floor(x) saturated in i32. Everything
   below is exact integer work or a correctly rounded f32 product or sum, never fused into an fma
   (which some compilers fuse and others do not), so every device writes the bytes the host
   would. Storage is addressed as 32-bit words: two 16-bit elements share one. */
#pragma OPENCL FP_CONTRACT OFF
#include "philox.h"

#define FILL_F32 0u
#define FILL_F16 1u
#define FILL_BF16 2u
#define FILL_I32 3u

uint fill_f16(uint f) {
  uint sign = (f >> 16) & 0x8000u;
  uint a = f & 0x7fffffffu;
  if (a >= 0x477ff000u) return sign | 0x7c00u; /* the range is finite: only overflow gets here */
  if (a >= 0x38800000u) return sign | ((a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13);
  if (a < 0x33000000u) return sign; /* below half the smallest subnormal: +-0 */
  uint shift = 126u - (a >> 23);    /* subnormal: the significand shifted into place, ties to even */
  uint m = (a & 0x7fffffu) | 0x800000u;
  uint q = m >> shift, rem = m & ((1u << shift) - 1u), half_ulp = 1u << (shift - 1u);
  return sign | (q + ((rem > half_ulp || (rem == half_ulp && (q & 1u) != 0u)) ? 1u : 0u));
}

uint fill_bf16(uint f) { return (f + 0x7fffu + ((f >> 16) & 1u)) >> 16; }

uint fill_i32(float x) {
  float f = floor(x);
  if (f >= 2147483648.0f) return 0x7fffffffu;
  if (f < -2147483648.0f) return 0x80000000u;
  return as_uint(convert_int(f));
}

uint fill_bits(uint word, float lo, float span, uint dtype) {
  float scaled = span * ((float)(word >> 8) * 0x1p-24f);
  float x = scaled + lo;
  if (dtype == FILL_F16) return fill_f16(as_uint(x));
  if (dtype == FILL_BF16) return fill_bf16(as_uint(x));
  if (dtype == FILL_I32) return fill_i32(x);
  return as_uint(x);
}

/* Blocks [block0, block0 + blocks) into out from word `word0` on, which holds element 4 * block0. */
__kernel void ejk_fill(__global uint* out, ulong word0, ulong block0, ulong blocks, uint k0, uint k1, float lo, float span,
                       uint dtype) {
  out += word0;
  for (ulong b = get_global_id(0); b < blocks; b += get_global_size(0)) {
    ulong block = block0 + b;
    uint4 r = ejk_philox4x32_10((uint4)((uint)block, (uint)(block >> 32), 0x66696c6cu, 0u), k0, k1);
    uint x0 = fill_bits(r.x, lo, span, dtype), x1 = fill_bits(r.y, lo, span, dtype);
    uint x2 = fill_bits(r.z, lo, span, dtype), x3 = fill_bits(r.w, lo, span, dtype);
    if (dtype == FILL_F16 || dtype == FILL_BF16) {
      out[2 * b] = x0 | (x1 << 16);
      out[2 * b + 1] = x2 | (x3 << 16);
    } else {
      out[4 * b] = x0;
      out[4 * b + 1] = x1;
      out[4 * b + 2] = x2;
      out[4 * b + 3] = x3;
    }
  }
}
