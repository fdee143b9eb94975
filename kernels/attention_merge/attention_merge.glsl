// attention_merge on Vulkan: the kernel of attention_merge.cl (see vulkan.cpp for the plan,
// attention_merge.hpp for the semantics), included with ELEM16 set (0: out and part f32; 1: any
// mix of f32, f16 and bf16 through 16-bit storage, the push constants out_dtype and part_dtype
// picking which). Work-items are the local size, elements per work-item (VEC: 1, 2 or 4) a
// specialization constant; sizes are push constants. Each array is also seen as arrays of VEC
// elements (vec2/vec4 for f32, uint/uvec2 holding 2/4 16-bit values), so a work-item's VEC
// elements move as one load and one store.
#extension GL_EXT_control_flow_attributes : require
#if ELEM16
#extension GL_EXT_shader_16bit_storage : require
#endif
#include "common/vulkan.glsl"

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
layout(constant_id = 3) const uint VEC = 1;  // contiguous elements per invocation

const uint THREADS = gl_WorkGroupSize.x;

layout(push_constant) uniform Push {
  uint rows, seq, heads, dim, rows_per_group, groups_x;
  uint out_dtype, part_dtype;  // 0 f32, 1 f16, 2 bf16 (f32 only without ELEM16)
} pc;

layout(binding = 0) buffer OutF { float out_f[]; };
layout(binding = 0) buffer OutF2 { vec2 out_f2[]; };
layout(binding = 0) buffer OutF4 { vec4 out_f4[]; };
layout(binding = 1) buffer Lse { float lse[]; };
layout(binding = 2) readonly buffer PartF { float part_f[]; };
layout(binding = 2) readonly buffer PartF2 { vec2 part_f2[]; };
layout(binding = 2) readonly buffer PartF4 { vec4 part_f4[]; };
layout(binding = 3) readonly buffer PartLse { float part_lse[]; };
#if ELEM16
layout(binding = 0) buffer OutH { uint16_t out_h[]; };
layout(binding = 0) buffer OutH2 { uint out_h2[]; };
layout(binding = 0) buffer OutH4 { uvec2 out_h4[]; };
layout(binding = 2) readonly buffer PartH { uint16_t part_h[]; };
layout(binding = 2) readonly buffer PartH2 { uint part_h2[]; };
layout(binding = 2) readonly buffer PartH4 { uvec2 part_h4[]; };
#endif

// Elements e .. e + VEC - 1 of out or part, and of out again (common/vulkan.glsl).
EJK_VEC_LOADER(out)
EJK_VEC_LOADER(part)
EJK_VEC_STORER(out)

// log1p without cancellation for x in [0, 1]: log(u) * x / (u - 1) corrects u's rounding.
float log1p_(float x) {
  const float u = 1.0 + x;
  return u == 1.0 ? x : log(u) * x / (u - 1.0);
}

bool neg_inf(float x) { return isinf(x) && x < 0.0; }

// Each row's weights (wa < 0: row left as it is; wa == 0: out not read; wc == 0: part not read).
shared float wa_s[THREADS * VEC];
shared float wc_s[THREADS * VEC];

void main() {
  const uint lid = gl_LocalInvocationID.x;
  const uint r0 = (gl_WorkGroupID.y * pc.groups_x + gl_WorkGroupID.x) * pc.rows_per_group;
  if (r0 >= pc.rows) return;  // the whole group: the grid is rounded up to a rectangle
  const uint nr = min(pc.rows_per_group, pc.rows - r0);
  for (uint i = lid; i < nr; i += THREADS) {
    const uint r = r0 + i, h = r % pc.heads, bs = r / pc.heads;
    const uint li = (bs / pc.seq * pc.heads + h) * pc.seq + bs % pc.seq;
    const float a = lse[li], c = part_lse[li];
    float wa, wc;
    if (neg_inf(c)) {
      wa = neg_inf(a) ? 0.0 : -1.0;
      wc = 0.0;
    } else if (neg_inf(a)) {
      wa = 0.0;
      wc = 1.0;
      lse[li] = c;
    } else {
      const float m = max(a, c) + log1p_(exp(-abs(a - c)));
      wa = exp(a - m);
      wc = exp(c - m);
      lse[li] = m;
    }
    wa_s[i] = wa;
    wc_s[i] = wc;
  }
  barrier();
  if (pc.dim == 0u) return;
  // The invocation's row i and column col advance by a whole step per iteration: no division in
  // the loop.
  const uint step = THREADS * VEC, drow = step / pc.dim, dcol = step % pc.dim, end = (r0 + nr) * pc.dim;
  uint i = lid * VEC / pc.dim, col = lid * VEC % pc.dim;
  for (uint e = r0 * pc.dim + lid * VEC; e < end; e += step) {
    const float wa = wa_s[i], wc = wc_s[i];
    if (wa >= 0.0) {
      vec4 x = vec4(0.0);
      if (wa != 0.0) x = load_out(e, pc.out_dtype) * wa;
      if (wc != 0.0) x += load_part(e, pc.part_dtype) * wc;
      store_out(e, pc.out_dtype, x);
    }
    i += drow;
    col += dcol;
    if (col >= pc.dim) {
      col -= pc.dim;
      ++i;
    }
  }
}
