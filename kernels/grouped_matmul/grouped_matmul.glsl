// grouped_matmul and grouped_matmul_tgmm on Vulkan: the tiled GEMM of grouped_matmul.cl (see
// vulkan.cpp for the plan), one module per kernel, included with TGMM and ELEM16 set (0: f32
// arrays; 1: f16 or bf16 arrays through 16-bit storage, the push constant dtype picking which).
// Tile geometry and trans_rhs are specialization constants; sizes are push constants.
#extension GL_EXT_control_flow_attributes : require
#if ELEM16
#extension GL_EXT_shader_16bit_storage : require
#endif
#include "common/vulkan.glsl"

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
layout(constant_id = 3) const uint TM = 32;
layout(constant_id = 4) const uint TN = 32;
layout(constant_id = 5) const uint TK = 16;
layout(constant_id = 6) const uint WM = 4;
layout(constant_id = 7) const uint WN = 4;
layout(constant_id = 8) const uint TRANS_B = 0;  // grouped_matmul with trans_rhs

const uint RM = TM / WM;  // invocations along m (local_size_y)
const uint RN = TN / WN;  // invocations along n (local_size_x)
const uint THREADS = RM * RN;
const uint SA = TM + 1;  // staged tiles are depth-major, rows padded by a word
const uint SB = TN + 1;

layout(push_constant) uniform Push {
  uint m, n, k, groups, dtype;
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

layout(binding = 0) readonly buffer L { ELEM lhs[]; };
layout(binding = 1) readonly buffer R { ELEM rhs[]; };  // rhs (grouped_matmul) or grad (tgmm)
layout(binding = 2) readonly buffer S { int sizes[]; };
layout(binding = 3) writeonly buffer O { ELEM out_[]; };

shared float As[TK * SA];
shared float Bs[TK * SB];

// c[i, j] = sum_p a(i, p) b(p, j) for i < M, j < N, p < K over the tile whose first elements
// are a0, b0, c0:  a(i, p) = lhs[a0 + i * lda + p] (TRANS_A 0) or lhs[a0 + p * lda + i] (1);
// b(p, j) = rhs[b0 + p * ldb + j] (trans 0) or rhs[b0 + j * ldb + p] (1).
void tile(uint a0, uint lda, bool trans_a, uint b0, uint ldb, bool trans_b, uint c0, uint ldc, uint M, uint N, uint K) {
  const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y, tid = ty * RN + tx;
  float acc[WM * WN];
  [[unroll]] for (uint i = 0; i < WM * WN; ++i) acc[i] = 0.0;
  for (uint k0 = 0; k0 < K; k0 += TK) {
    for (uint e = tid; e < TM * TK; e += THREADS) {
      const uint i = trans_a ? e % TM : e / TK, p = trans_a ? e / TM : e % TK;
      As[p * SA + i] = i < M && k0 + p < K ? LD(lhs, a0 + (trans_a ? (k0 + p) * lda + i : i * lda + k0 + p)) : 0.0;
    }
    for (uint e = tid; e < TN * TK; e += THREADS) {
      const uint j = trans_b ? e / TK : e % TN, p = trans_b ? e % TK : e / TN;
      Bs[p * SB + j] = j < N && k0 + p < K ? LD(rhs, b0 + (trans_b ? j * ldb + k0 + p : (k0 + p) * ldb + j)) : 0.0;
    }
    barrier();
    for (uint p = 0; p < TK; ++p) {
      float av[WM], bv[WN];
      [[unroll]] for (uint i = 0; i < WM; ++i) av[i] = As[p * SA + ty + i * RM];
      [[unroll]] for (uint j = 0; j < WN; ++j) bv[j] = Bs[p * SB + tx + j * RN];
      [[unroll]] for (uint i = 0; i < WM; ++i)
        [[unroll]] for (uint j = 0; j < WN; ++j) acc[i * WN + j] = fma(av[i], bv[j], acc[i * WN + j]);
    }
    barrier();
  }
  [[unroll]] for (uint i = 0; i < WM; ++i) {
    const uint r = ty + i * RM;
    if (r < M)
      [[unroll]] for (uint j = 0; j < WN; ++j) {
        const uint col = tx + j * RN;
        if (col < N) ST(out_, c0 + r * ldc + col, acc[i * WN + j]);
      }
  }
}

uint clamped(uint g, uint off) { return uint(clamp(sizes[g], 0, int(pc.m - off))); }

#if TGMM
// Grid: (column tiles of n, row tiles of k, groups): out[g] = lhs_g^T . grad_g; an empty group
// stores zeros.
void main() {
  const uint g = gl_WorkGroupID.z;
  uint off = 0;
  for (uint h = 0; h < g; ++h) off += clamped(h, off);
  const uint rows = clamped(g, off);
  const uint i0 = gl_WorkGroupID.y * TM, n0 = gl_WorkGroupID.x * TN;
  tile(off * pc.k + i0, pc.k, true, off * pc.n + n0, pc.n, false, (g * pc.k + i0) * pc.n + n0, pc.n,
       min(TM, pc.k - i0), min(TN, pc.n - n0), rows);
}
#else
// Grid: (column tiles, row-tile slots): slot s is the s-th row tile counting through the groups
// in order; surplus slots return (the grid has ceil(m / TM) + groups of them).
void main() {
  uint slot = gl_WorkGroupID.y, off = 0, g = 0, size = 0;
  for (; g < pc.groups; ++g) {
    size = clamped(g, off);
    const uint tiles = EJK_CEIL_DIV(size, TM);
    if (slot < tiles) break;
    slot -= tiles;
    off += size;
  }
  if (g == pc.groups) return;
  const uint row0 = off + slot * TM, n0 = gl_WorkGroupID.x * TN;
  const uint b0 = TRANS_B != 0 ? (g * pc.n + n0) * pc.k : g * pc.k * pc.n + n0;
  tile(row0 * pc.k, pc.k, false, b0, TRANS_B != 0 ? pc.k : pc.n, TRANS_B != 0, row0 * pc.n + n0, pc.n,
       min(TM, off + size - row0), min(TN, pc.n - n0), pc.k);
}
#endif
