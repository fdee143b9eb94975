// Scalar tiled GEMM, shared by matmul.comp (f32 storage) and matmul16.comp (f16 and bf16
// storage through 16-bit buffers); both accumulate in f32. Included with ELEM16 set to 0 or 1.
//
//   c[z] = alpha * op(a[z]) * op(b[z]) + beta * c[z]    (beta == 0: c is not read)
//
// A workgroup computes a TM x TN tile of c; each invocation WM x WN elements strided by the
// workgroup's extent, so neighbouring invocations read neighbouring shared-memory words. Tiles of
// a and b pass through shared memory TK deep, converted to f32. With PREFETCH the next tiles are
// loaded into registers while the current ones are multiplied, and stored into the other of two
// shared buffers: one barrier per step.

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

layout(constant_id = 3) const uint TM = 64;
layout(constant_id = 4) const uint TN = 64;
layout(constant_id = 5) const uint TK = 16;
layout(constant_id = 6) const uint WM = 4;
layout(constant_id = 7) const uint WN = 4;
layout(constant_id = 8) const uint VEC = 1;       // elements per global load: 1, 2 or 4
layout(constant_id = 9) const uint PREFETCH = 1;  // 0 or 1
layout(constant_id = 10) const uint TRANS_A = 0;
layout(constant_id = 11) const uint TRANS_B = 0;
layout(constant_id = 12) const uint DTYPE = 0;  // 16-bit storage: 0 f16, 1 bf16

const uint RM = TM / WM;  // invocations along m (local_size_y)
const uint RN = TN / WN;  // invocations along n (local_size_x)
const uint THREADS = RM * RN;
// Shared tiles are k-major. An operand whose memory rows run along k is transposed on the way
// in; one word of padding per row spreads those stores over the banks.
const uint SA = TM + 1 - TRANS_A;
const uint SB = TN + TRANS_B;
const uint LA = TM * TK / (VEC * THREADS);  // vector loads per invocation per tile
const uint LB = TN * TK / (VEC * THREADS);
const uint BUFS = PREFETCH + 1;

shared float As[BUFS * TK * SA];
shared float Bs[BUFS * TK * SB];

layout(push_constant) uniform Push {
  uint m, n, k;
  uint stride_a, stride_b, stride_c;  // elements between batches; 0: shared by every batch
  float alpha, beta;
  uint group_x, group_y, group_z;  // first workgroup of this dispatch (large grids are split)
} pc;

#if ELEM16
layout(binding = 0) readonly buffer A1 { uint16_t a1[]; };
layout(binding = 0) readonly buffer A2 { uint a2[]; };
layout(binding = 0) readonly buffer A4 { uvec2 a4[]; };
layout(binding = 1) readonly buffer B1 { uint16_t b1[]; };
layout(binding = 1) readonly buffer B2 { uint b2[]; };
layout(binding = 1) readonly buffer B4 { uvec2 b4[]; };
layout(binding = 2) buffer C1 { uint16_t c1[]; };

// Not common/vulkan.glsl's codecs, though the same numbers: those would change this SPIR-V, for
// which the shipped profiles/ are tuned.
float decode(uint h) { return DTYPE == 0 ? unpackHalf2x16(h).x : uintBitsToFloat(h << 16); }
vec2 decode2(uint w) {
  return DTYPE == 0 ? unpackHalf2x16(w) : vec2(uintBitsToFloat(w << 16), uintBitsToFloat(w & 0xffff0000u));
}
uint encode(float x) {
  if (DTYPE == 0) return packHalf2x16(vec2(x, 0.0)) & 0xffffu;
  if (isnan(x)) return 0x7fc0u;
  uint u = floatBitsToUint(x);
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // round to nearest even
}

vec4 load_a(uint e) {
  if (VEC == 4) {
    uvec2 w = a4[e / 4];
    return vec4(decode2(w.x), decode2(w.y));
  }
  if (VEC == 2) return vec4(decode2(a2[e / 2]), 0.0, 0.0);
  return vec4(decode(uint(a1[e])), 0.0, 0.0, 0.0);
}
vec4 load_b(uint e) {
  if (VEC == 4) {
    uvec2 w = b4[e / 4];
    return vec4(decode2(w.x), decode2(w.y));
  }
  if (VEC == 2) return vec4(decode2(b2[e / 2]), 0.0, 0.0);
  return vec4(decode(uint(b1[e])), 0.0, 0.0, 0.0);
}
float load_c(uint e) { return decode(uint(c1[e])); }
void store_c(uint e, float v) { c1[e] = uint16_t(encode(v)); }
#else
layout(binding = 0) readonly buffer A1 { float a1[]; };
layout(binding = 0) readonly buffer A2 { vec2 a2[]; };
layout(binding = 0) readonly buffer A4 { vec4 a4[]; };
layout(binding = 1) readonly buffer B1 { float b1[]; };
layout(binding = 1) readonly buffer B2 { vec2 b2[]; };
layout(binding = 1) readonly buffer B4 { vec4 b4[]; };
layout(binding = 2) buffer C1 { float c1[]; };

vec4 load_a(uint e) {
  if (VEC == 4) return a4[e / 4];
  if (VEC == 2) return vec4(a2[e / 2], 0.0, 0.0);
  return vec4(a1[e], 0.0, 0.0, 0.0);
}
vec4 load_b(uint e) {
  if (VEC == 4) return b4[e / 4];
  if (VEC == 2) return vec4(b2[e / 2], 0.0, 0.0);
  return vec4(b1[e], 0.0, 0.0, 0.0);
}
float load_c(uint e) { return c1[e]; }
void store_c(uint e, float v) { c1[e] = v; }
#endif

float acc[WM * WN];
vec4 ra[LA];
vec4 rb[LB];
uint tid, m0, n0, abase, bbase;

// Global -> registers. Rows and columns are those of the operand in memory; the space only
// offers VEC dividing the contiguous extent, so a vector lies wholly inside or outside.
void load_tiles(uint k0) {
  [[unroll]] for (uint i = 0; i < LA; ++i) {
    uint u = tid + i * THREADS;
    uint row, col, rows, cols;
    if (TRANS_A == 0) {
      row = m0 + u / (TK / VEC), col = k0 + (u % (TK / VEC)) * VEC, rows = pc.m, cols = pc.k;
    } else {
      row = k0 + u / (TM / VEC), col = m0 + (u % (TM / VEC)) * VEC, rows = pc.k, cols = pc.m;
    }
    ra[i] = row < rows && col < cols ? load_a(abase + row * cols + col) : vec4(0.0);
  }
  [[unroll]] for (uint i = 0; i < LB; ++i) {
    uint u = tid + i * THREADS;
    uint row, col, rows, cols;
    if (TRANS_B == 0) {
      row = k0 + u / (TN / VEC), col = n0 + (u % (TN / VEC)) * VEC, rows = pc.k, cols = pc.n;
    } else {
      row = n0 + u / (TK / VEC), col = k0 + (u % (TK / VEC)) * VEC, rows = pc.n, cols = pc.k;
    }
    rb[i] = row < rows && col < cols ? load_b(bbase + row * cols + col) : vec4(0.0);
  }
}

// Registers -> shared buffer `buf`, k-major.
void store_tiles(uint buf) {
  uint a0 = buf * TK * SA, b0 = buf * TK * SB;
  [[unroll]] for (uint i = 0; i < LA; ++i) {
    uint u = tid + i * THREADS;
    [[unroll]] for (uint j = 0; j < VEC; ++j) {
      if (TRANS_A == 0) As[a0 + ((u % (TK / VEC)) * VEC + j) * SA + u / (TK / VEC)] = ra[i][j];
      else As[a0 + (u / (TM / VEC)) * SA + (u % (TM / VEC)) * VEC + j] = ra[i][j];
    }
  }
  [[unroll]] for (uint i = 0; i < LB; ++i) {
    uint u = tid + i * THREADS;
    [[unroll]] for (uint j = 0; j < VEC; ++j) {
      if (TRANS_B == 0) Bs[b0 + (u / (TN / VEC)) * SB + (u % (TN / VEC)) * VEC + j] = rb[i][j];
      else Bs[b0 + ((u % (TK / VEC)) * VEC + j) * SB + u / (TK / VEC)] = rb[i][j];
    }
  }
}

void multiply(uint buf) {
  uint a0 = buf * TK * SA + gl_LocalInvocationID.y, b0 = buf * TK * SB + gl_LocalInvocationID.x;
  for (uint kk = 0; kk < TK; ++kk) {
    float a[WM], b[WN];
    [[unroll]] for (uint i = 0; i < WM; ++i) a[i] = As[a0 + kk * SA + i * RM];
    [[unroll]] for (uint j = 0; j < WN; ++j) b[j] = Bs[b0 + kk * SB + j * RN];
    [[unroll]] for (uint i = 0; i < WM; ++i)
      [[unroll]] for (uint j = 0; j < WN; ++j) acc[i * WN + j] = fma(a[i], b[j], acc[i * WN + j]);
  }
}

void main() {
  tid = gl_LocalInvocationID.y * RN + gl_LocalInvocationID.x;
  uint z = gl_WorkGroupID.z + pc.group_z;
  m0 = (gl_WorkGroupID.y + pc.group_y) * TM;
  n0 = (gl_WorkGroupID.x + pc.group_x) * TN;
  abase = z * pc.stride_a;
  bbase = z * pc.stride_b;
  [[unroll]] for (uint i = 0; i < WM * WN; ++i) acc[i] = 0.0;

  uint tiles = (pc.k + TK - 1) / TK;
  if (PREFETCH == 1) {
    if (tiles > 0) {
      load_tiles(0);
      store_tiles(0);
    }
    barrier();
    for (uint t = 0; t < tiles; ++t) {
      if (t + 1 < tiles) load_tiles((t + 1) * TK);
      multiply(t & 1);
      if (t + 1 < tiles) store_tiles((t + 1) & 1);
      barrier();
    }
  } else {
    for (uint t = 0; t < tiles; ++t) {
      load_tiles(t * TK);
      store_tiles(0);
      barrier();
      multiply(0);
      barrier();
    }
  }

  uint cbase = z * pc.stride_c;
  [[unroll]] for (uint i = 0; i < WM; ++i) {
    uint row = m0 + gl_LocalInvocationID.y + i * RM;
    if (row >= pc.m) break;
    [[unroll]] for (uint j = 0; j < WN; ++j) {
      uint col = n0 + gl_LocalInvocationID.x + j * RN;
      if (col >= pc.n) break;
      uint e = cbase + row * pc.n + col;
      float v = pc.alpha * acc[i * WN + j];
      if (pc.beta != 0.0) v += pc.beta * load_c(e);
      store_c(e, v);
    }
  }
}
