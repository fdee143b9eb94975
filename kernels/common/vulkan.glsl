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


// A shader's array `name` bound as name_f / name_f2 / name_f4 (float, vec2, vec4) and, where
// ELEM16 is set, the same binding again as name_h / name_h2 / name_h4 (uint16_t, uint, uvec2):
// so that an invocation's VEC (1, 2 or 4) contiguous elements move as one load and one store
// whatever the dtype. EJK_VEC_LOADER(name) defines vec4 load_name(e, dt), elements e .. e + VEC
// - 1 (the rest of the vec4 0); EJK_VEC_STORER(name) defines store_name(e, dt, x), x's first VEC
// elements there; e a multiple of VEC. The shader sets ELEM16 before it includes this file.
#define EJK_VEC_LOAD_F32_(name, e)                                                    \
  if (VEC == 4u) return name##_f4[e / 4u];                                            \
  if (VEC == 2u) return vec4(name##_f2[e / 2u], 0.0, 0.0);                            \
  return vec4(name##_f[e], 0.0, 0.0, 0.0);
#define EJK_VEC_STORE_F32_(name, e, x)                                                \
  if (VEC == 4u) name##_f4[e / 4u] = x;                                               \
  else if (VEC == 2u) name##_f2[e / 2u] = x.xy;                                       \
  else name##_f[e] = x.x;
#if defined(ELEM16) && ELEM16
#define EJK_VEC_LOADER(name)                                                          \
  vec4 load_##name(uint e, uint dt) {                                                 \
    if (dt == 0u) {                                                                   \
      EJK_VEC_LOAD_F32_(name, e)                                                      \
    }                                                                                 \
    if (VEC == 4u) return ejk_decode16x4(name##_h4[e / 4u], dt);                      \
    if (VEC == 2u) return vec4(ejk_decode16x2(name##_h2[e / 2u], dt), 0.0, 0.0);      \
    return vec4(EJK_LD16(name##_h, e, dt), 0.0, 0.0, 0.0);                            \
  }
#define EJK_VEC_STORER(name)                                                          \
  void store_##name(uint e, uint dt, vec4 x) {                                        \
    if (dt != 0u) {                                                                   \
      if (VEC == 4u) name##_h4[e / 4u] = uvec2(ejk_encode16x2(x.xy, dt), ejk_encode16x2(x.zw, dt)); \
      else if (VEC == 2u) name##_h2[e / 2u] = ejk_encode16x2(x.xy, dt);               \
      else EJK_ST16(name##_h, e, dt, x.x);                                            \
      return;                                                                         \
    }                                                                                 \
    EJK_VEC_STORE_F32_(name, e, x)                                                    \
  }
#else
#define EJK_VEC_LOADER(name) \
  vec4 load_##name(uint e, uint dt) { EJK_VEC_LOAD_F32_(name, e) }
#define EJK_VEC_STORER(name) \
  void store_##name(uint e, uint dt, vec4 x) { EJK_VEC_STORE_F32_(name, e, x) }
#endif
#endif
