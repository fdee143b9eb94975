#version 450
// mla_decode's absorb pass on tensor cores through GL_NV_cooperative_matrix (16x16x16 f16 x f16
// -> f32 fragments), for f16 queries and weights: qs = scale log2(e) [q_nope w_kc, q_pe], per head
// a small GEMM over the batch, so that each head's w_kc is read once for 32 sequences (the
// scalar pass read it once for 4). A workgroup of four subgroups takes 32 sequences of one head
// and 64 latent columns (16 rows and 32 columns a subgroup); its rows of q_nope (zeros past the
// batch) and columns of w_kc are staged in shared memory as f16, and the products go through
// shared memory so that only the batch's rows are written. Each group also copies the scaled q_pe
// of its share of the 32 sequences (a group of its own for q_pe made 144 groups at DeepSeek-V3
// widths, a second wave on a GPU of 132 multiprocessors), every load before any store.
#extension GL_GOOGLE_include_directive : require
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
#include "common/vulkan.glsl"

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;  // 128 x 1 x 1
layout(constant_id = 3) const uint NOPE = 128;  // qk_nope_head_dim, a multiple of 16
layout(constant_id = 4) const uint RANK = 512;  // kv_lora_rank, a multiple of 64
layout(constant_id = 5) const uint ROPE = 64;   // rope_dim

const uint WIDTH = RANK + ROPE;
const uint AR = NOPE + 8;  // halves a staged row of q_nope (16 bytes of padding)
const uint WR = 72;        // halves a staged row of the block's 64 columns of w_kc
const float LOG2E = 1.4426950408889634;
const uint QA = EJK_CEIL_DIV(32 * (NOPE / 8), 128);  // 8-half units of q_nope a thread stages
const uint QW = EJK_CEIL_DIV(NOPE * 8, 128);         // of w_kc
const uint NX = RANK / 64;                           // groups along x
const uint PR = EJK_CEIL_DIV(32, NX);                // sequences whose q_pe a group copies
const uint PE = EJK_CEIL_DIV(PR * ROPE, 128);        // elements of q_pe a thread copies

layout(push_constant) uniform Push {
  uint heads, nope_dim, block_size, max_blocks;
  uint splits, v_dim, dtype;
  float scale;
  uint batch;
} pc;

layout(binding = 0) readonly buffer QN { uvec4 qn8[]; };
layout(binding = 1) readonly buffer QP { float16_t qp[]; };
layout(binding = 2) readonly buffer WK { uvec4 wk8[]; };
layout(binding = 3) writeonly buffer QS { float qs[]; };

// In units of 8 halves: q_nope [32][AR], w_kc [NOPE][WR]; then the products [32][64] in f32.
const uint AB = 0, WB = AB + 32 * AR / 8;
shared uvec4 hs[WB + NOPE * WR / 8];
shared float out_s[32 * 64];

void main() {
  const uint lid = gl_LocalInvocationID.x, h = gl_WorkGroupID.y, b0 = gl_WorkGroupID.z * 32;
  const uint n0 = gl_WorkGroupID.x * 64;
  const float s = pc.scale * LOG2E;
  // Every load issued before any store, so that their latencies overlap.
  float pe[PE];
  [[unroll]] for (uint i = 0; i < PE; ++i) {
    const uint e = lid + i * 128, r = gl_WorkGroupID.x * PR + e / ROPE, b = b0 + r;
    pe[i] = e < PR * ROPE && r < 32 && b < pc.batch ? float(qp[(b * pc.heads + h) * ROPE + e % ROPE]) : 0.0;
  }
  uvec4 ra[QA], rw[QW];
  [[unroll]] for (uint i = 0; i < QA; ++i) {
    const uint u = lid + i * 128, r = u / (NOPE / 8), k = u % (NOPE / 8), b = b0 + r;
    ra[i] = u < 32 * (NOPE / 8) && b < pc.batch ? qn8[((b * pc.heads + h) * NOPE) / 8 + k] : uvec4(0);
  }
  [[unroll]] for (uint i = 0; i < QW; ++i) {
    const uint u = lid + i * 128, k = u / 8, n = u % 8;
    rw[i] = u < NOPE * 8 ? wk8[((h * NOPE + k) * RANK + n0) / 8 + n] : uvec4(0);
  }
  [[unroll]] for (uint i = 0; i < QA; ++i) {
    const uint u = lid + i * 128, r = u / (NOPE / 8), k = u % (NOPE / 8);
    if (u < 32 * (NOPE / 8)) hs[AB + r * (AR / 8) + k] = ra[i];
  }
  [[unroll]] for (uint i = 0; i < QW; ++i) {
    const uint u = lid + i * 128, k = u / 8, n = u % 8;
    if (u < NOPE * 8) hs[WB + k * (WR / 8) + n] = rw[i];
  }
  [[unroll]] for (uint i = 0; i < PE; ++i) {
    const uint e = lid + i * 128, r = gl_WorkGroupID.x * PR + e / ROPE, b = b0 + r;
    if (e < PR * ROPE && r < 32 && b < pc.batch) qs[(b * pc.heads + h) * WIDTH + RANK + e % ROPE] = s * pe[i];
  }
  barrier();
  const uint sg = gl_SubgroupID, r0 = (sg / 2) * 16, c0 = (sg % 2) * 32;
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[2];
  acc[0] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
  acc[1] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
  for (uint k = 0; k < NOPE; k += 16) {
    fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a;
    coopMatLoadNV(a, hs, AB + r0 * (AR / 8) + k / 8, AR / 8, false);
    [[unroll]] for (uint j = 0; j < 2; ++j) {
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> w;
      coopMatLoadNV(w, hs, WB + k * (WR / 8) + (c0 + 16 * j) / 8, WR / 8, false);
      acc[j] = coopMatMulAddNV(a, w, acc[j]);
    }
  }
  [[unroll]] for (uint j = 0; j < 2; ++j) coopMatStoreNV(acc[j], out_s, r0 * 64 + c0 + 16 * j, 64, false);
  barrier();
  for (uint e = lid; e < 32 * 64; e += 128) {
    const uint r = e / 64, b = b0 + r;
    if (b < pc.batch) qs[(b * pc.heads + h) * WIDTH + n0 + e % 64] = s * out_s[e];
  }
}
