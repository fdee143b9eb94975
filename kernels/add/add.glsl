// add on Vulkan: the kernel of add.cl (see space.hpp for the plan, add.hpp for the semantics),
// included with ELEM16 set (0: a, b and out f32; 1: any mix of f32, f16 and bf16 through 16-bit
// storage, the push constants a_dtype, b_dtype and out_dtype picking which). Work-items are the
// local size, elements per work-item (VEC: 1, 2 or 4) a specialization constant; numel and alpha
// are push constants. Each array is also seen as arrays of VEC elements (vec2/vec4 for f32,
// uint/uvec2 holding 2/4 16-bit values), so a work-item's VEC elements move as one load and one
// store. Nothing is declared restrict: out may be bound to a's or b's buffer.
#extension GL_EXT_control_flow_attributes : require
#if ELEM16
#extension GL_EXT_shader_16bit_storage : require
#endif
#include "common/vulkan.glsl"

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
layout(constant_id = 3) const uint VEC = 1;  // contiguous elements per invocation

const uint THREADS = gl_WorkGroupSize.x;

layout(push_constant) uniform Push {
  uint n, groups_x;
  uint a_dtype, b_dtype, out_dtype;  // 0 f32, 1 f16, 2 bf16 (f32 only without ELEM16)
  float alpha;
} pc;

layout(binding = 0) readonly buffer AF { float a_f[]; };
layout(binding = 0) readonly buffer AF2 { vec2 a_f2[]; };
layout(binding = 0) readonly buffer AF4 { vec4 a_f4[]; };
layout(binding = 1) readonly buffer BF { float b_f[]; };
layout(binding = 1) readonly buffer BF2 { vec2 b_f2[]; };
layout(binding = 1) readonly buffer BF4 { vec4 b_f4[]; };
layout(binding = 2) buffer OutF { float out_f[]; };
layout(binding = 2) buffer OutF2 { vec2 out_f2[]; };
layout(binding = 2) buffer OutF4 { vec4 out_f4[]; };
#if ELEM16
layout(binding = 0) readonly buffer AH { uint16_t a_h[]; };
layout(binding = 0) readonly buffer AH2 { uint a_h2[]; };
layout(binding = 0) readonly buffer AH4 { uvec2 a_h4[]; };
layout(binding = 1) readonly buffer BH { uint16_t b_h[]; };
layout(binding = 1) readonly buffer BH2 { uint b_h2[]; };
layout(binding = 1) readonly buffer BH4 { uvec2 b_h4[]; };
layout(binding = 2) buffer OutH { uint16_t out_h[]; };
layout(binding = 2) buffer OutH2 { uint out_h2[]; };
layout(binding = 2) buffer OutH4 { uvec2 out_h4[]; };
#endif

// load_X(e, dt): elements e .. e + VEC - 1 of a or b (common/vulkan.glsl); load1_X(i, dt):
// element i alone.
#if ELEM16
#define LOAD1(name) \
  float load1_##name(uint i, uint dt) { return dt == 0u ? name##_f[i] : EJK_LD16(name##_h, i, dt); }
#else
#define LOAD1(name) \
  float load1_##name(uint i, uint dt) { return name##_f[i]; }
#endif
EJK_VEC_LOADER(a)
LOAD1(a)
EJK_VEC_LOADER(b)
LOAD1(b)
EJK_VEC_STORER(out)

void store1_out(uint i, uint dt, float x) {
#if ELEM16
  if (dt != 0u) {
    EJK_ST16(out_h, i, dt, x);
    return;
  }
#endif
  out_f[i] = x;
}

// One group per THREADS * VEC elements, groups beyond the first dimension's limit as further
// rows of a 2D grid. Indices are 32-bit: the host refuses 2^31 - 1 elements or more, so neither
// e nor e + VEC wraps. alpha == 0 skips b altogether (0 * NaN would be NaN).
void main() {
  const uint e = ((gl_WorkGroupID.y * pc.groups_x + gl_WorkGroupID.x) * THREADS + gl_LocalInvocationID.x) * VEC;
  if (e >= pc.n) return;
  if (e + VEC <= pc.n) {
    vec4 x = load_a(e, pc.a_dtype);
    if (pc.alpha != 0.0) x += pc.alpha * load_b(e, pc.b_dtype);
    store_out(e, pc.out_dtype, x);
  } else {
    // The last partial vector, element by element.
    for (uint i = e; i < pc.n; ++i) {
      float x = load1_a(i, pc.a_dtype);
      if (pc.alpha != 0.0) x += pc.alpha * load1_b(i, pc.b_dtype);
      store1_out(i, pc.out_dtype, x);
    }
  }
}
