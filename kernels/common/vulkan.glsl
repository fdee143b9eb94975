// The GLSL prelude: what the kernels' Vulkan shaders share (#include "common/vulkan.glsl";
// glslc's depfiles rebuild every shader that includes it when it changes). Philox, shared with C
// and OpenCL C, is common/philox.h.
//
// Storage codecs: f16 and bf16 elements of 16-bit storage (GL_EXT_shader_16bit_storage's
// uint16_t, or two to a 32-bit word) as f32, and back; all arithmetic is f32. The rules of the
// OpenCL C prelude (common/clc.h): f16 rounds to nearest even (packHalf2x16), bf16 is the high
// half of an f32, widened by a shift and narrowed rounding to nearest even, NaN becoming the
// quiet NaN 0x7fc0. dt is the storage dtype of the host's push constants: 1 f16, 2 bf16.
// matmul.glsl keeps its own copy, whose dtype is a specialization constant: the shipped
// profiles/ are tuned for its exact SPIR-V, which the prelude's functions would change.
#ifndef EJK_COMMON_VULKAN_GLSL
#define EJK_COMMON_VULKAN_GLSL

// ceil(a / b), and a rounded up to a multiple of b, for a >= 0 and b > 0, int or uint alike.
#define EJK_CEIL_DIV(a, b) (((a) + (b) - 1) / (b))
#define EJK_ROUND_UP(a, b) (EJK_CEIL_DIV(a, b) * (b))

float ejk_decode16(uint h, uint dt) { return dt == 1u ? unpackHalf2x16(h).x : uintBitsToFloat(h << 16); }

// Two elements of one 32-bit word, the lower element in the low half (little-endian).
vec2 ejk_decode16x2(uint w, uint dt) {
  return dt == 1u ? unpackHalf2x16(w) : vec2(uintBitsToFloat(w << 16), uintBitsToFloat(w & 0xffff0000u));
}

vec4 ejk_decode16x4(uvec2 w, uint dt) { return vec4(ejk_decode16x2(w.x, dt), ejk_decode16x2(w.y, dt)); }

uint ejk_encode16(float x, uint dt) {
  if (dt == 1u) return packHalf2x16(vec2(x, 0.0)) & 0xffffu;
  if (isnan(x)) return 0x7fc0u;
  uint u = floatBitsToUint(x);
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // round to nearest even
}

uint ejk_encode16x2(vec2 x, uint dt) {
  return dt == 1u ? packHalf2x16(x) : ejk_encode16(x.x, dt) | (ejk_encode16(x.y, dt) << 16);
}

// Element i of a uint16_t array as f32, and x stored there.
#define EJK_LD16(a, i, dt) ejk_decode16(uint(a[i]), (dt))
#define EJK_ST16(a, i, dt, x) a[i] = uint16_t(ejk_encode16((x), (dt)))

#endif
