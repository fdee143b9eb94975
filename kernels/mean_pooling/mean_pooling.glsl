// mean_pooling and mean_pooling_bwd on Vulkan: the kernels of mean_pooling.cl (see vulkan.cpp for
// the plan), one module per pass, included with PASS and ELEM16 set (0: f32 arrays; 1: f16 or
// bf16 arrays through 16-bit storage, the push constant dtype picking which). Work-items,
// columns per work-item and rows are specialization constants; offsets, sizes and the number of
// parts are push constants.
#extension GL_EXT_control_flow_attributes : require
#if ELEM16
#extension GL_EXT_shader_16bit_storage : require
#endif
#include "common/vulkan.glsl"

#define POOL 0
#define FINISH 1
#define BWD 2

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
layout(constant_id = 3) const uint VEC = 1;   // columns per invocation
layout(constant_id = 4) const uint ROWS = 1;  // invocations along the tokens

const uint THREADS = gl_WorkGroupSize.x;
const uint TX = THREADS / ROWS;  // invocations along the columns
const uint CB = TX * VEC;        // columns of a group

layout(push_constant) uniform Push {
  uint packed, seq, tokens, segs, dim, blocks, splits, dtype;
} pc;

#if ELEM16
#define ELEM uint16_t
#define LD(a, i) EJK_LD16(a, i, pc.dtype)
#define ST(a, i, x) EJK_ST16(a, i, pc.dtype, x)
#else
#define ELEM float
#define LD(a, i) a[i]
#define ST(a, i, x) a[i] = (x)
#endif

layout(binding = 1) readonly buffer CU { int cu[]; };

// Tokens [a, b) of sequence s, offsets clamped to the token array so that unchecked bad offsets
// cannot reach outside it.
void bounds(uint s, out uint a, out uint b) {
  if (pc.packed != 0u) {
    a = uint(clamp(cu[s], 0, int(pc.tokens)));
    b = uint(clamp(cu[s + 1], int(a), int(pc.tokens)));
  } else {
    a = s * pc.seq;
    b = a + pc.seq;
  }
}

#if PASS == FINISH
layout(binding = 0) readonly buffer P { float partial[]; };
layout(binding = 2) writeonly buffer O { ELEM out_[]; };

void main() {
  const uint i = gl_GlobalInvocationID.x;
  if (i >= pc.segs * pc.dim) return;
  uint a, b;
  bounds(i / pc.dim, a, b);
  float acc = 0.0;
  for (uint q = 0; q < pc.splits; ++q) acc += partial[q * pc.segs * pc.dim + i];
  ST(out_, i, b > a ? acc / float(b - a) : 0.0);
}
#else

// This group's part [a, b) of sequence s, and the sequence's length.
void part(uint s, uint q, out uint a, out uint b, out uint len) {
  uint start, end;
  bounds(s, start, end);
  const uint chunk = EJK_CEIL_DIV(end - start, pc.splits);
  a = min(end, start + q * chunk);
  b = min(end, a + chunk);
  len = end - start;
}

#if PASS == POOL
layout(binding = 0) readonly buffer X { ELEM x[]; };
layout(binding = 2) writeonly buffer O { ELEM out_[]; };
layout(binding = 3) writeonly buffer P { float partial[]; };
shared float red[THREADS * VEC];

void main() {
  const uint lid = gl_LocalInvocationID.x, tx = lid % TX, ty = lid / TX;
  const uint blk = gl_WorkGroupID.x % pc.blocks, s = gl_WorkGroupID.x / pc.blocks, q = gl_WorkGroupID.y;
  uint a, b, len;
  part(s, q, a, b, len);
  const uint c0 = blk * CB + tx * VEC;
  float acc[VEC];
  [[unroll]] for (uint v = 0; v < VEC; ++v) acc[v] = 0.0;
  if (c0 + VEC <= pc.dim) {
    for (uint t = a + ty; t < b; t += ROWS)
      [[unroll]] for (uint v = 0; v < VEC; ++v) acc[v] += LD(x, t * pc.dim + c0 + v);
  } else {
    for (uint t = a + ty; t < b; t += ROWS)
      [[unroll]] for (uint v = 0; v < VEC; ++v)
        if (c0 + v < pc.dim) acc[v] += LD(x, t * pc.dim + c0 + v);
  }
  if (ROWS > 1) {
    // The ROWS partial sums of each column, halved until one is left.
    [[unroll]] for (uint v = 0; v < VEC; ++v) red[lid * VEC + v] = acc[v];
    for (uint r = ROWS / 2; r > 0; r /= 2) {
      barrier();
      if (ty < r)
        [[unroll]] for (uint v = 0; v < VEC; ++v) red[lid * VEC + v] += red[(lid + r * TX) * VEC + v];
    }
    if (ty != 0) return;
    [[unroll]] for (uint v = 0; v < VEC; ++v) acc[v] = red[lid * VEC + v];
  }
  const float w = len > 0 ? 1.0 / float(len) : 0.0;
  [[unroll]] for (uint v = 0; v < VEC; ++v) {
    const uint c = c0 + v;
    if (c < pc.dim) {
      if (pc.splits == 1) ST(out_, s * pc.dim + c, acc[v] * w);
      else partial[(q * pc.segs + s) * pc.dim + c] = acc[v];
    }
  }
}

#else  // BWD
layout(binding = 0) readonly buffer G { ELEM dout[]; };
layout(binding = 2) writeonly buffer DX { ELEM dx[]; };

void main() {
  const uint lid = gl_LocalInvocationID.x, tx = lid % TX, ty = lid / TX;
  const uint blk = gl_WorkGroupID.x % pc.blocks, s = gl_WorkGroupID.x / pc.blocks, q = gl_WorkGroupID.y;
  uint a, b, len;
  part(s, q, a, b, len);
  if (a >= b) return;
  const uint c0 = blk * CB + tx * VEC;
  const float w = 1.0 / float(len);
  float g[VEC];
  [[unroll]] for (uint v = 0; v < VEC; ++v) g[v] = c0 + v < pc.dim ? LD(dout, s * pc.dim + c0 + v) * w : 0.0;
  if (c0 + VEC <= pc.dim) {
    for (uint t = a + ty; t < b; t += ROWS)
      [[unroll]] for (uint v = 0; v < VEC; ++v) ST(dx, t * pc.dim + c0 + v, g[v]);
  } else {
    for (uint t = a + ty; t < b; t += ROWS)
      [[unroll]] for (uint v = 0; v < VEC; ++v)
        if (c0 + v < pc.dim) ST(dx, t * pc.dim + c0 + v, g[v]);
  }
}
#endif
#endif
