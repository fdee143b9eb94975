#version 450
// matmul in f16 on tensor cores through GL_NV_cooperative_matrix: f16 operands, f32
// accumulation, f16 result.
//
//   c[z] = alpha * op(a[z]) * op(b[z]) + beta * c[z]    (beta == 0: c is not read)
//
// A workgroup of SG_M x SG_N subgroups computes a TM x TN tile of c; each subgroup FM x FN
// fragments of LM x LN. Tiles of a and b, BK deep, go global -> registers (8 halves per load
// where the leading dimension allows) -> shared memory, keeping their memory layout with 16
// bytes of padding per row; fragments load from there row- or column-major as the transposes
// say. Vulkan has no asynchronous copy into shared memory, so the loads' latency hides behind
// the multiplies of the tiles before them: AHEAD (1 or 2) sets of registers hold the next tiles
// in flight, the load of tile t + AHEAD issued before tile t is multiplied. With BUFFERS == 1
// a tile is stored to shared memory between two barriers; with BUFFERS == 2 into the other
// buffer while this one is read (one barrier per step). GROUP_M > 1 walks the tiles of c in
// bands of GROUP_M tile rows, column by column within a band, so the workgroups running together
// share their a and b tiles in L2. Staging is bounds-checked and zero-filled, so any m, n, k
// works; results go straight to memory where the fragment lies inside c, 16-byte aligned and
// beta == 0, and through a per-subgroup shared scratch with per-element checks otherwise.
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

layout(constant_id = 3) const uint SG = 32;  // subgroup size
layout(constant_id = 4) const uint LM = 16;  // cooperative-matrix shape
layout(constant_id = 5) const uint LN = 16;
layout(constant_id = 6) const uint LK = 16;
layout(constant_id = 7) const uint SG_M = 2;  // subgroups per workgroup along m and n
layout(constant_id = 8) const uint SG_N = 2;
layout(constant_id = 9) const uint FM = 4;  // fragments per subgroup along m and n
layout(constant_id = 10) const uint FN = 4;
layout(constant_id = 11) const uint BK = 32;
layout(constant_id = 12) const uint VEC = 8;  // halves per global load: 1, 2, 4 or 8
layout(constant_id = 13) const uint BUFFERS = 1;
layout(constant_id = 14) const uint TRANS_A = 0;
layout(constant_id = 15) const uint TRANS_B = 0;
layout(constant_id = 16) const uint AHEAD = 1;    // tiles loaded ahead of the one multiplied
layout(constant_id = 17) const uint GROUP_M = 1;  // tile rows of a band of c (1: row by row)

const uint THREADS = SG * SG_M * SG_N;
const uint TM = SG_M * FM * LM;
const uint TN = SG_N * FN * LN;
// Shared tiles in memory layout: a is TM x BK (BK x TM transposed), b is BK x TN (TN x BK).
const uint A_ROWS = TRANS_A == 0 ? TM : BK;
const uint A_COLS = TRANS_A == 0 ? BK : TM;
const uint B_ROWS = TRANS_B == 0 ? BK : TN;
const uint B_COLS = TRANS_B == 0 ? TN : BK;
const uint A_STRIDE = A_COLS + 8;  // halves
const uint B_STRIDE = B_COLS + 8;
const uint A_VEC4 = A_ROWS * A_STRIDE / 8;
const uint B_VEC4 = B_ROWS * B_STRIDE / 8;
const uint STAGE = A_VEC4 + B_VEC4;
const uint SCRATCH = SG_M * SG_N * LM * LN / 4;  // one f32 fragment per subgroup
const uint SMEM = BUFFERS * STAGE > SCRATCH ? BUFFERS * STAGE : SCRATCH;
const uint UA = A_ROWS * A_COLS / 8 / THREADS;  // 8-half units per invocation per tile
const uint UB = B_ROWS * B_COLS / 8 / THREADS;

shared uvec4 smem[SMEM];

layout(push_constant) uniform Push {
  uint m, n, k;
  uint stride_a, stride_b, stride_c;  // elements between batches; 0: shared by every batch
  float alpha, beta;
  uint group_x, group_y, group_z;  // first workgroup of this dispatch (large grids are split)
} pc;

layout(binding = 0) readonly buffer A1 { uint16_t a1[]; };
layout(binding = 0) readonly buffer A2 { uint a2[]; };
layout(binding = 0) readonly buffer A4 { uvec2 a4[]; };
layout(binding = 0) readonly buffer A8 { uvec4 a8[]; };
layout(binding = 1) readonly buffer B1 { uint16_t b1[]; };
layout(binding = 1) readonly buffer B2 { uint b2[]; };
layout(binding = 1) readonly buffer B4 { uvec2 b4[]; };
layout(binding = 1) readonly buffer B8 { uvec4 b8[]; };
layout(binding = 2) buffer C1 { uint16_t c1[]; };
layout(binding = 2) buffer CH { float16_t ch[]; };

// Two register sets for tiles in flight (the second only used with AHEAD == 2), named rather
// than indexed so that they stay in registers.
uvec4 ra0[UA], ra1[UA];
uvec4 rb0[UB], rb1[UB];
uint tid, m0, n0, abase, bbase;

// Eight halves from element e on, `valid` of them inside the operand (the space only offers
// VEC dividing the leading dimension, so a vector lies wholly inside or outside).
uvec4 load8_a(uint e, uint valid) {
  uvec4 r = uvec4(0);
  if (VEC == 8) {
    if (valid == 8) r = a8[e / 8];
  } else if (VEC == 4) {
    [[unroll]] for (uint h = 0; h < 2; ++h)
      if (valid >= 4 * h + 4) {
        uvec2 w = a4[e / 4 + h];
        r[2 * h] = w.x;
        r[2 * h + 1] = w.y;
      }
  } else if (VEC == 2) {
    [[unroll]] for (uint q = 0; q < 4; ++q)
      if (valid >= 2 * q + 2) r[q] = a2[e / 2 + q];
  } else {
    [[unroll]] for (uint q = 0; q < 8; ++q)
      if (q < valid) r[q / 2] |= uint(a1[e + q]) << (16 * (q % 2));
  }
  return r;
}

uvec4 load8_b(uint e, uint valid) {
  uvec4 r = uvec4(0);
  if (VEC == 8) {
    if (valid == 8) r = b8[e / 8];
  } else if (VEC == 4) {
    [[unroll]] for (uint h = 0; h < 2; ++h)
      if (valid >= 4 * h + 4) {
        uvec2 w = b4[e / 4 + h];
        r[2 * h] = w.x;
        r[2 * h + 1] = w.y;
      }
  } else if (VEC == 2) {
    [[unroll]] for (uint q = 0; q < 4; ++q)
      if (valid >= 2 * q + 2) r[q] = b2[e / 2 + q];
  } else {
    [[unroll]] for (uint q = 0; q < 8; ++q)
      if (q < valid) r[q / 2] |= uint(b1[e + q]) << (16 * (q % 2));
  }
  return r;
}

uint valid8(uint row, uint col, uint rows, uint cols) { return row < rows && col < cols ? min(8u, cols - col) : 0u; }

#define LOAD_TILES(NAME, RA, RB)                                                      \
  void NAME(uint k0) {                                                                \
    [[unroll]] for (uint i = 0; i < UA; ++i) {                                        \
      uint u = tid + i * THREADS;                                                     \
      uint r = u / (A_COLS / 8), c = (u % (A_COLS / 8)) * 8;                          \
      uint row = TRANS_A == 0 ? m0 + r : k0 + r;                                      \
      uint col = TRANS_A == 0 ? k0 + c : m0 + c;                                      \
      uint rows = TRANS_A == 0 ? pc.m : pc.k;                                         \
      uint cols = TRANS_A == 0 ? pc.k : pc.m;                                         \
      RA[i] = load8_a(abase + row * cols + col, valid8(row, col, rows, cols));        \
    }                                                                                 \
    [[unroll]] for (uint i = 0; i < UB; ++i) {                                        \
      uint u = tid + i * THREADS;                                                     \
      uint r = u / (B_COLS / 8), c = (u % (B_COLS / 8)) * 8;                          \
      uint row = TRANS_B == 0 ? k0 + r : n0 + r;                                      \
      uint col = TRANS_B == 0 ? n0 + c : k0 + c;                                      \
      uint rows = TRANS_B == 0 ? pc.k : pc.n;                                         \
      uint cols = TRANS_B == 0 ? pc.n : pc.k;                                         \
      RB[i] = load8_b(bbase + row * cols + col, valid8(row, col, rows, cols));        \
    }                                                                                 \
  }

#define STORE_TILES(NAME, RA, RB)                                                     \
  void NAME(uint buf) {                                                               \
    uint a0 = buf * STAGE, b0 = buf * STAGE + A_VEC4;                                 \
    [[unroll]] for (uint i = 0; i < UA; ++i) {                                        \
      uint u = tid + i * THREADS;                                                     \
      smem[a0 + (u / (A_COLS / 8)) * (A_STRIDE / 8) + u % (A_COLS / 8)] = RA[i];      \
    }                                                                                 \
    [[unroll]] for (uint i = 0; i < UB; ++i) {                                        \
      uint u = tid + i * THREADS;                                                     \
      smem[b0 + (u / (B_COLS / 8)) * (B_STRIDE / 8) + u % (B_COLS / 8)] = RB[i];      \
    }                                                                                 \
  }

LOAD_TILES(load_tiles0, ra0, rb0)
LOAD_TILES(load_tiles1, ra1, rb1)
STORE_TILES(store_tiles0, ra0, rb0)
STORE_TILES(store_tiles1, ra1, rb1)

// Tile t's registers: set t % AHEAD.
void load_tiles(uint t) {
  if (AHEAD == 2 && t % 2 == 1)
    load_tiles1(t * BK);
  else
    load_tiles0(t * BK);
}

void store_tiles(uint t, uint buf) {
  if (AHEAD == 2 && t % 2 == 1)
    store_tiles1(buf);
  else
    store_tiles0(buf);
}

fcoopmatNV<32, gl_ScopeSubgroup, LM, LN> acc[FM][FN];

void multiply(uint buf, uint sm, uint sn) {
  uint a0 = buf * STAGE, b0 = buf * STAGE + A_VEC4;
  [[unroll]] for (uint kk = 0; kk < BK; kk += LK) {
    fcoopmatNV<16, gl_ScopeSubgroup, LM, LK> fa[FM];
    [[unroll]] for (uint i = 0; i < FM; ++i) {
      uint row = (sm * FM + i) * LM;
      if (TRANS_A == 0)
        coopMatLoadNV(fa[i], smem, a0 + (row * A_STRIDE + kk) / 8, A_STRIDE / 8, false);
      else
        coopMatLoadNV(fa[i], smem, a0 + (kk * A_STRIDE + row) / 8, A_STRIDE / 8, true);
    }
    [[unroll]] for (uint j = 0; j < FN; ++j) {
      uint col = (sn * FN + j) * LN;
      fcoopmatNV<16, gl_ScopeSubgroup, LK, LN> fb;
      if (TRANS_B == 0)
        coopMatLoadNV(fb, smem, b0 + (kk * B_STRIDE + col) / 8, B_STRIDE / 8, false);
      else
        coopMatLoadNV(fb, smem, b0 + (col * B_STRIDE + kk) / 8, B_STRIDE / 8, true);
      [[unroll]] for (uint i = 0; i < FM; ++i) acc[i][j] = coopMatMulAddNV(fa[i], fb, acc[i][j]);
    }
  }
}

void main() {
  tid = gl_LocalInvocationID.x;
  uint sm = gl_SubgroupID / SG_N, sn = gl_SubgroupID % SG_N;
  uint z = gl_WorkGroupID.z + pc.group_z;
  uint tile_m = gl_WorkGroupID.y + pc.group_y, tile_n = gl_WorkGroupID.x + pc.group_x;
  // Banding needs the whole grid of tiles in one dispatch (the host splits only past the
  // device's workgroup counts).
  if (GROUP_M > 1 && pc.group_x == 0 && pc.group_y == 0) {
    uint nx = gl_NumWorkGroups.x, ny = gl_NumWorkGroups.y;
    uint linear = gl_WorkGroupID.y * nx + gl_WorkGroupID.x, band = GROUP_M * nx;
    uint first = linear / band * GROUP_M, height = min(ny - first, GROUP_M);
    tile_m = first + linear % band % height;
    tile_n = linear % band / height;
  }
  m0 = tile_m * TM;
  n0 = tile_n * TN;
  abase = z * pc.stride_a;
  bbase = z * pc.stride_b;
  [[unroll]] for (uint i = 0; i < FM; ++i)
    [[unroll]] for (uint j = 0; j < FN; ++j) acc[i][j] = fcoopmatNV<32, gl_ScopeSubgroup, LM, LN>(0.0);

  // Step t: tile t is in shared buffer t % BUFFERS, tiles t + 1 .. t + AHEAD - 1 are in flight
  // in registers; tile t + AHEAD is loaded into the set tile t left, then tile t is multiplied
  // and tile t + 1 stored.
  uint tiles = (pc.k + BK - 1) / BK;
  [[unroll]] for (uint t = 0; t < AHEAD; ++t)
    if (t < tiles) load_tiles(t);
  if (tiles > 0) store_tiles(0, 0);
  barrier();
  for (uint t = 0; t < tiles; ++t) {
    if (t + AHEAD < tiles) load_tiles(t + AHEAD);
    multiply(BUFFERS == 2 ? t % 2 : 0, sm, sn);
    if (t + 1 < tiles) {
      if (BUFFERS == 1) barrier();
      store_tiles(t + 1, BUFFERS == 2 ? (t + 1) % 2 : 0);
    }
    barrier();
  }
  barrier();  // every fragment load is done: the scratch may reuse the staging buffers

  uint cbase = z * pc.stride_c;
  uint scratch = gl_SubgroupID * (LM * LN / 4);
  bool direct = pc.beta == 0.0 && pc.n % 8 == 0;
  [[unroll]] for (uint i = 0; i < FM; ++i) {
    [[unroll]] for (uint j = 0; j < FN; ++j) {
      uint gi = m0 + (sm * FM + i) * LM, gj = n0 + (sn * FN + j) * LN;
      if (gi >= pc.m || gj >= pc.n) continue;
      fcoopmatNV<32, gl_ScopeSubgroup, LM, LN> v = pc.alpha * acc[i][j];
      if (direct && gi + LM <= pc.m && gj + LN <= pc.n) {
        fcoopmatNV<16, gl_ScopeSubgroup, LM, LN> h = fcoopmatNV<16, gl_ScopeSubgroup, LM, LN>(v);
        coopMatStoreNV(h, ch, cbase + gi * pc.n + gj, pc.n, false);
      } else {
        coopMatStoreNV(v, smem, scratch, LN / 4, false);
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        [[unroll]] for (uint e = 0; e < LM * LN / SG; ++e) {
          uint idx = gl_SubgroupInvocationID + e * SG;
          uint r = idx / LN, c = idx % LN;
          if (gi + r < pc.m && gj + c < pc.n) {
            uint ce = cbase + (gi + r) * pc.n + gj + c;
            float x = uintBitsToFloat(smem[scratch + idx / 4][idx % 4]);
            if (pc.beta != 0.0) x += pc.beta * unpackHalf2x16(uint(c1[ce])).x;
            c1[ce] = uint16_t(packHalf2x16(vec2(x, 0.0)) & 0xffffu);
          }
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();
      }
    }
  }
}
