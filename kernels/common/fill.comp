#version 450
// Random inputs on the device: whole blocks of four elements of fill_uniform. The definition and
// why every device writes the host's bytes: fill.cl, whose steps this shader repeats. Storage is
// addressed as 32-bit words (two 16-bit elements share one), so no 16-bit storage is needed.
#extension GL_GOOGLE_include_directive : require
#include "philox.h"

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

layout(std430, binding = 0) buffer Out { uint out_words[]; };

// Blocks [block0, block0 + blocks) into out_words from word `word0` on, which holds element
// 4 * block0.
layout(push_constant) uniform Push {
  uint word0, block0_lo, block0_hi, blocks, k0, k1;
  float lo, span;
  uint dtype;  // 0 f32, 1 f16, 2 bf16, 3 i32
} pc;

uint fill_f16(uint f) {
  uint sign = (f >> 16) & 0x8000u;
  uint a = f & 0x7fffffffu;
  if (a >= 0x477ff000u) return sign | 0x7c00u;
  if (a >= 0x38800000u) return sign | ((a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13);
  if (a < 0x33000000u) return sign;
  uint shift = 126u - (a >> 23);
  uint m = (a & 0x7fffffu) | 0x800000u;
  uint q = m >> shift, rem = m & ((1u << shift) - 1u), half_ulp = 1u << (shift - 1u);
  return sign | (q + ((rem > half_ulp || (rem == half_ulp && (q & 1u) != 0u)) ? 1u : 0u));
}

uint fill_bf16(uint f) { return (f + 0x7fffu + ((f >> 16) & 1u)) >> 16; }

uint fill_i32(float x) {
  float f = floor(x);
  if (f >= 2147483648.0) return 0x7fffffffu;
  if (f < -2147483648.0) return 0x80000000u;
  return uint(int(f));
}

uint fill_bits(uint word, float lo, float span, uint dtype) {
  // precise: the product and the sum stay two correctly rounded steps, never fused.
  precise float scaled = span * (float(word >> 8) * uintBitsToFloat(0x33800000u));
  precise float x = scaled + lo;
  if (dtype == 1u) return fill_f16(floatBitsToUint(x));
  if (dtype == 2u) return fill_bf16(floatBitsToUint(x));
  if (dtype == 3u) return fill_i32(x);
  return floatBitsToUint(x);
}

void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint b = gl_GlobalInvocationID.x; b < pc.blocks; b += stride) {
    const uint lo_word = pc.block0_lo + b;
    const uint hi_word = pc.block0_hi + (lo_word < b ? 1u : 0u);
    const uvec4 r = ejk_philox4x32_10(uvec4(lo_word, hi_word, 0x66696c6cu, 0u), pc.k0, pc.k1);
    const uint x0 = fill_bits(r.x, pc.lo, pc.span, pc.dtype), x1 = fill_bits(r.y, pc.lo, pc.span, pc.dtype);
    const uint x2 = fill_bits(r.z, pc.lo, pc.span, pc.dtype), x3 = fill_bits(r.w, pc.lo, pc.span, pc.dtype);
    if (pc.dtype == 1u || pc.dtype == 2u) {
      out_words[pc.word0 + 2u * b] = x0 | (x1 << 16);
      out_words[pc.word0 + 2u * b + 1u] = x2 | (x3 << 16);
    } else {
      out_words[pc.word0 + 4u * b] = x0;
      out_words[pc.word0 + 4u * b + 1u] = x1;
      out_words[pc.word0 + 4u * b + 2u] = x2;
      out_words[pc.word0 + 4u * b + 3u] = x3;
    }
  }
}
