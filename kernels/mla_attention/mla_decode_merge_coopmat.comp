#version 450
// mla_decode's merge and value projection in one pass on tensor cores through
// GL_NV_cooperative_matrix (16x16x16 f16 x f16 -> f32), for f16 outputs and weights: out = o w_vc[h]
// with o the parts' o_lat merged by log-sum-exp and normalised, straight into the projection's
// left operand in shared memory (as f16, as the reference rounds it), so no merged o_lat goes
// through memory and w_vc[h] is read once for ROWS sequences.
//
// A workgroup of eight subgroups takes ROWS sequences of one head (16, 8 or 4, the first rows of
// every fragment, the rest zeros: fewer where 16 would leave compute units without a group, as
// one group a multiprocessor streaming its parts' o_lat and w_vc[h] is what bounds the pass) and
// every column of out, each subgroup a 16-column fragment over the whole rank, so no partial sums
// cross subgroups. w_vc[h] travels in chunks of KC rows: four chunks in flight in registers
// (issued before the merge, so that they land while it runs) and one staged in shared memory.
// Parts that saw no token have l = 0 and weight 0; their o_lat is zeros. Grid (heads,
// ceil(batch / ROWS)) x 256.
#extension GL_GOOGLE_include_directive : require
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
#include "common/vulkan.glsl"

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;  // 256 x 1 x 1
layout(constant_id = 3) const uint RANK = 512;  // kv_lora_rank, a multiple of KC
layout(constant_id = 4) const uint VDIM = 128;  // v_head_dim, a multiple of 16
layout(constant_id = 5) const uint KC = 64;     // rows of w_vc a chunk, a multiple of 16
layout(constant_id = 6) const uint ROWS = 16;   // sequences a group: 16, 8 or 4

const uint THREADS = 256;
const uint OR = RANK + 8;   // halves a row of the merged o (16 bytes of padding)
const uint VR = VDIM + 8;   // halves a staged row of w_vc
const uint CHUNKS = RANK / KC;
const uint FRAGS = VDIM / 16;                  // column fragments of out
const uint FPS = EJK_CEIL_DIV(FRAGS, 8);       // a subgroup's
const uint PF = EJK_CEIL_DIV(KC * VDIM / 8, THREADS);  // 8-half units of a chunk a thread
const uint ITEMS = EJK_CEIL_DIV(ROWS * RANK / 4, THREADS);  // four-column pieces of o a thread merges
const uint AHEAD = 16 / ROWS;                   // parts whose loads are in flight together
const uint MAXS = 32;                           // parts (the space's largest `splits`); the subgroup size
#define NEG uintBitsToFloat(0xff800000u)

layout(push_constant) uniform Push {
  uint heads, nope_dim, block_size, max_blocks;
  uint splits, v_dim, dtype;
  float scale;
  uint batch;
} pc;

layout(binding = 0) readonly buffer PartO { vec4 part_o4[]; };
layout(binding = 1) readonly buffer PartML { float part_ml[]; };
layout(binding = 2) readonly buffer WV { uvec4 wv8[]; };
layout(binding = 3) writeonly buffer Out { float16_t out_h[]; };

// In units of 8 halves: o [16][OR], a chunk of w_vc [KC][VR]. f32: the parts' weights [16][MAXS],
// the products [16][VDIM].
const uint OB = 0, WB = OB + 16 * OR / 8;
shared uvec4 hs[WB + KC * VR / 8];
const uint PB = 16 * MAXS;
shared float fs[PB + 16 * VDIM];

// A ring of four chunks in registers, each set named (the chunk loop runs a spec-constant count of
// times, which the driver does not unroll, and a set indexed at run time would live in local
// memory).
uvec4 r0[PF], r1[PF], r2[PF], r3[PF];
#define FETCH(R, C)                                                                        \
  if ((C) < CHUNKS)                                                                        \
    [[unroll]] for (uint t = 0; t < PF; ++t) {                                             \
      const uint u = lid + t * THREADS;                                                    \
      R[t] = u < KC * (VDIM / 8) ? wv8[((h * RANK + (C) * KC + u / (VDIM / 8)) * VDIM) / 8 + u % (VDIM / 8)] \
                                 : uvec4(0);                                               \
    }
#define DEPOSIT(R)                                                                         \
  [[unroll]] for (uint t = 0; t < PF; ++t) {                                               \
    const uint u = lid + t * THREADS;                                                      \
    if (u < KC * (VDIM / 8)) hs[WB + (u / (VDIM / 8)) * (VR / 8) + u % (VDIM / 8)] = R[t]; \
  }
// Chunk c from set R: staged once every subgroup is done with the last (and, for the first, the
// merge's o is written), then R refilled with chunk c + 4.
#define STEP(R, C)                                                                         \
  if ((C) < CHUNKS) {                                                                      \
    barrier();                                                                             \
    DEPOSIT(R)                                                                             \
    barrier();                                                                             \
    FETCH(R, (C) + 4)                                                                      \
    compute(C, sg);                                                                        \
  }

fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[FPS];

void compute(uint c, uint sg) {
  [[unroll]] for (uint kk = 0; kk < KC; kk += 16) {
    fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a;
    coopMatLoadNV(a, hs, OB + (c * KC + kk) / 8, OR / 8, false);
    [[unroll]] for (uint f = 0; f < FPS; ++f) {
      const uint j = sg + 8 * f;
      if (j < FRAGS) {
        fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> w;
        coopMatLoadNV(w, hs, WB + kk * (VR / 8) + j * 2, VR / 8, false);
        acc[f] = coopMatMulAddNV(a, w, acc[f]);
      }
    }
  }
}

void main() {
  const uint lid = gl_LocalInvocationID.x, h = gl_WorkGroupID.x, b0 = gl_WorkGroupID.y * ROWS, sg = gl_SubgroupID;
  FETCH(r0, 0)
  FETCH(r1, 1)
  FETCH(r2, 2)
  FETCH(r3, 3)

  // Each sequence's parts' weights exp2(m - max) / sum, a subgroup a row and a lane a part (MAXS
  // is the subgroup's size), 0 past the parts: the row's loads in flight together, its max and
  // sum by the subgroup.
  for (uint r = sg; r < ROWS; r += THREADS / MAXS) {
    const uint b = b0 + r, s = gl_SubgroupInvocationID, slot = ((b * pc.heads + h) * pc.splits + s) * 2;
    const bool live = b < pc.batch && s < pc.splits;
    const float ms = live ? part_ml[slot] : NEG, ls = live ? part_ml[slot + 1] : 0.0;
    const float mx = subgroupMax(ls > 0.0 ? ms : NEG);
    const float w = ls > 0.0 ? exp2(ms - mx) : 0.0;
    const float total = subgroupAdd(w * ls);
    fs[r * MAXS + s] = total > 0.0 ? w / total : 0.0;
  }
  // Rows past ROWS stay zero for the whole pass.
  for (uint e = lid; e < (16 - ROWS) * (OR / 8); e += THREADS) hs[OB + ROWS * (OR / 8) + e] = uvec4(0);
  barrier();
  // The merge, AHEAD parts' loads of a thread in flight together. Rows past the batch read the
  // last sequence's parts with weight 0, parts past the last read the last.
  {
    vec4 x[ITEMS];
    [[unroll]] for (uint i = 0; i < ITEMS; ++i) x[i] = vec4(0.0);
    for (uint s0 = 0; s0 < pc.splits; s0 += AHEAD)
      [[unroll]] for (uint j = 0; j < AHEAD; ++j)
        [[unroll]] for (uint i = 0; i < ITEMS; ++i) {
          const uint e = lid + i * THREADS, r = min(e / (RANK / 4), ROWS - 1), b = min(b0 + r, pc.batch - 1);
          const uint s = min(s0 + j, pc.splits - 1);
          x[i] += fs[r * MAXS + s0 + j] * part_o4[(((b * pc.heads + h) * pc.splits + s) * RANK) / 4 + e % (RANK / 4)];
        }
    [[unroll]] for (uint i = 0; i < ITEMS; ++i) {
      const uint e = lid + i * THREADS, r = e / (RANK / 4), hh = r * OR + 4 * (e % (RANK / 4));
      if (r < ROWS) {
        hs[OB + hh / 8][(hh % 8) / 2] = packHalf2x16(x[i].xy);
        hs[OB + hh / 8][(hh % 8) / 2 + 1] = packHalf2x16(x[i].zw);
      }
    }
  }

  [[unroll]] for (uint f = 0; f < FPS; ++f) acc[f] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
  for (uint c = 0; c < CHUNKS; c += 4) {
    STEP(r0, c)
    STEP(r1, c + 1)
    STEP(r2, c + 2)
    STEP(r3, c + 3)
  }
  [[unroll]] for (uint f = 0; f < FPS; ++f)
    if (sg + 8 * f < FRAGS) coopMatStoreNV(acc[f], fs, PB + (sg + 8 * f) * 16, VDIM, false);
  barrier();
  for (uint e = lid; e < ROWS * VDIM; e += THREADS) {
    const uint b = b0 + e / VDIM;
    if (b < pc.batch) out_h[(b * pc.heads + h) * VDIM + e % VDIM] = float16_t(fs[PB + e]);
  }
}
