#version 450
// mla_decode's attend pass on tensor cores through GL_NV_cooperative_matrix (16x16x16 f16 x f16
// -> f32 fragments), for f16 caches: the scalar pass's contract (a part of the context, 16 heads
// and a sequence; the part's unnormalised o_lat and its running max and sum in the log2 domain),
// its arithmetic on fragments.
//
// The group's 16 heads are the 16 rows of every fragment; q (already scaled by the absorb pass)
// is staged once as f16 and kept in fragment registers, each subgroup its own steps of the row,
// so that the group's shared memory (24 KiB at DeepSeek-V3 widths) lets two groups share an SM.
// Per tile of 16 cache rows, staged as f16 (rows padded by 16 bytes; the next tile's loads travel
// in registers while this one is computed): each of the NSG subgroups sums the scores q . row^T
// over its share of the row's 16-column steps into its f32 scratch; the first 128 invocations,
// 8 a head, add the shares in a fixed order and run the online softmax (P as f16, each head's
// rescale factor into a [16][16] matrix whose fragment has the output fragments' element
// layout); each subgroup then rescales its RANK / NSG columns of o_lat and adds P . c_kv for
// them.
#extension GL_GOOGLE_include_directive : require
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
#include "common/vulkan.glsl"

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
layout(constant_id = 3) const uint SG = 32;      // subgroup size
layout(constant_id = 4) const uint NSG = 4;      // subgroups; NSG * SG >= 128
layout(constant_id = 5) const uint RANK = 512;   // kv_lora_rank, a multiple of 16 NSG
layout(constant_id = 6) const uint ROPE = 64;    // rope_dim; RANK + ROPE a multiple of 16

const uint THREADS = SG * NSG;
const uint WIDTH = RANK + ROPE;
const uint HS = WIDTH + 8;       // halves per staged row
const uint STEPS = WIDTH / 16;   // 16-column steps of a row
const uint QF = EJK_CEIL_DIV(STEPS, NSG);  // q fragments a subgroup
const uint FO = RANK / 16 / NSG;  // o_lat fragments a subgroup
const uint TU = 16 * HS / 8;      // 8-half units of a staged tile
const uint TILE = 16 * WIDTH / 8;  // 8-half units of a tile's data
const uint PF = EJK_CEIL_DIV(TILE, THREADS);
const uint QB = 8;                 // four-float pieces of q a thread loads at once
#define NEG uintBitsToFloat(0xff800000u)

layout(push_constant) uniform Push {
  uint heads, nope_dim, block_size, max_blocks;
  uint splits, v_dim, dtype;
  float scale;
  uint batch;
} pc;

layout(binding = 0) readonly buffer QS { vec4 qs4[]; };  // rows of WIDTH floats, WIDTH a multiple of 16
layout(binding = 1) readonly buffer KV8 { uvec4 kv8[]; };
layout(binding = 2) readonly buffer Tables { int block_tables[]; };
layout(binding = 3) readonly buffer Lens { int context_lens[]; };
layout(binding = 4) writeonly buffer PartO { float part_o[]; };
layout(binding = 5) writeonly buffer PartML { float part_ml[]; };

// f16, in units of 8 halves: the tile [16][HS] (q staged there before the walk), P [16][24].
const uint KB = 0, PB = TU;
shared uvec4 hs[PB + 48];
// f32: per-subgroup scores [NSG][16][16], per-lane row partials [16][8]. The rescale factors
// [16][16] overlay the first subgroup's scores: the invocation that writes a factor is the only
// one that read the score under it.
const uint SB = 0, RB = NSG * 256;
shared float fs[RB + 128];

uvec4 pk[PF];
// The 16 rows from token t0 of sequence b (t0 a multiple of 16, so within one page), zeros
// from row `rows` on, into registers.
void fetch(uint b, int t0, int rows) {
  const int page = block_tables[b * pc.max_blocks + uint(t0) / pc.block_size];
  const uint base = (uint(page) * pc.block_size + uint(t0) % pc.block_size) * (WIDTH / 8);
  [[unroll]] for (uint t = 0; t < PF; ++t) {
    const uint u = gl_LocalInvocationID.x + t * THREADS;
    const uint r = u / (WIDTH / 8);
    pk[t] = u < TILE && int(r) < rows ? kv8[base + u] : uvec4(0);
  }
}
void deposit() {
  [[unroll]] for (uint t = 0; t < PF; ++t) {
    const uint u = gl_LocalInvocationID.x + t * THREADS;
    if (u < TILE) {
      const uint r = u / (WIDTH / 8), c = u - r * (WIDTH / 8);
      hs[KB + r * (HS / 8) + c] = pk[t];
    }
  }
}

fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> qf[QF];
fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> o[FO];
float m = NEG, l = 0.0;

// The staged tile's scores (its first `rows` rows live), the online softmax, o_lat += P . c_kv.
void tile(int rows) {
  const uint lid = gl_LocalInvocationID.x, s = gl_SubgroupID;
  // Softmax roles: head `row`, columns 2 part and 2 part + 1 (the first 128 invocations).
  const uint row = lid / 8, part = lid % 8;
  const bool soft = lid < 128;
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
  [[unroll]] for (uint i = 0; i < QF; ++i) {
    const uint f = s + i * NSG;
    if (f < STEPS) {
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> k;
      coopMatLoadNV(k, hs, KB + f * 2, HS / 8, true);
      acc = coopMatMulAddNV(qf[i], k, acc);
    }
  }
  coopMatStoreNV(acc, fs, SB + s * 256, 16, false);
  barrier();

  if (soft) {
    float z[2];
    float mx = NEG;
    [[unroll]] for (uint e = 0; e < 2; ++e) {
      const uint c = 2 * part + e;
      float x = 0.0;
      for (uint g = 0; g < NSG; ++g) x += fs[SB + g * 256 + row * 16 + c];
      z[e] = int(c) < rows ? x : NEG;
      mx = max(mx, z[e]);
    }
    // The row's 8 lanes lie in one subgroup (8 divides SG).
    fs[RB + row * 8 + part] = mx;
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    for (uint x = 0; x < 8; ++x) mx = max(mx, fs[RB + row * 8 + x]);
    mx = max(mx, m);
    const float alpha = exp2(m - mx);  // m is NEG only before the first tile: 0
    m = mx;
    const float p0 = exp2(z[0] - mx), p1 = exp2(z[1] - mx);
    const uint h = row * 24 + 2 * part;
    hs[PB + h / 8][(h % 8) / 2] = packHalf2x16(vec2(p0, p1));
    subgroupBarrier();  // every lane of the row has read the row maxima
    fs[RB + row * 8 + part] = p0 + p1;
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    float sum = 0.0;
    for (uint x = 0; x < 8; ++x) sum += fs[RB + row * 8 + x];
    l = l * alpha + sum;
    fs[SB + row * 16 + 2 * part] = alpha;
    fs[SB + row * 16 + 2 * part + 1] = alpha;
  }
  barrier();

  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> factor;
  coopMatLoadNV(factor, fs, SB, 16, false);
  fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> p;
  coopMatLoadNV(p, hs, PB, 24 / 8, false);
  [[unroll]] for (uint f = 0; f < FO; ++f) {
    for (int i = 0; i < o[f].length(); ++i) o[f][i] *= factor[i];
    fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> v;
    coopMatLoadNV(v, hs, KB + (s * FO + f) * 2, HS / 8, false);
    o[f] = coopMatMulAddNV(p, v, o[f]);
  }
}

void main() {
  const uint split = gl_WorkGroupID.x, h0 = gl_WorkGroupID.y * 16, b = gl_WorkGroupID.z;
  const uint lid = gl_LocalInvocationID.x, s = gl_SubgroupID;

  // q's 16 rows as four-float pieces, QB of a thread's loads in flight together (a load and its
  // store a piece at a time waited out the latency of each).
  for (uint e0 = 0; e0 < 16 * (WIDTH / 4); e0 += QB * THREADS) {
    vec4 x[QB];
    [[unroll]] for (uint i = 0; i < QB; ++i) {
      const uint e = e0 + lid + i * THREADS, r = e / (WIDTH / 4), c = e - r * (WIDTH / 4);
      x[i] = e < 16 * (WIDTH / 4) ? qs4[(b * pc.heads + h0 + r) * (WIDTH / 4) + c] : vec4(0.0);
    }
    [[unroll]] for (uint i = 0; i < QB; ++i) {
      const uint e = e0 + lid + i * THREADS, r = e / (WIDTH / 4), c = e - r * (WIDTH / 4), h = r * HS + 4 * c;
      if (e < 16 * (WIDTH / 4)) {
        hs[KB + h / 8][(h % 8) / 2] = packHalf2x16(x[i].xy);
        hs[KB + h / 8][(h % 8) / 2 + 1] = packHalf2x16(x[i].zw);
      }
    }
  }
  barrier();
  [[unroll]] for (uint i = 0; i < QF; ++i)
    if (s + i * NSG < STEPS) coopMatLoadNV(qf[i], hs, KB + (s + i * NSG) * 2, HS / 8, false);
  [[unroll]] for (uint f = 0; f < FO; ++f) o[f] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);

  const int n = context_lens[b];
  const int per = EJK_CEIL_DIV(n, int(pc.splits));
  const int chunk = EJK_ROUND_UP(per, 16);
  const int start = min(n, int(split) * chunk), end = min(n, start + chunk);
  if (start < end) fetch(b, start, min(16, end - start));
  for (int t0 = start; t0 < end; t0 += 16) {
    barrier();  // q is in registers, the last tile's P . c_kv is done: the tile, P and factors may be rewritten
    deposit();
    barrier();
    if (t0 + 16 < end) fetch(b, t0 + 16, min(16, end - t0 - 16));
    tile(min(16, end - t0));
  }

  // The part's o_lat rows (heads) lie splits * RANK floats apart.
  const uint slot0 = (b * pc.heads + h0) * pc.splits + split;
  [[unroll]] for (uint f = 0; f < FO; ++f)
    coopMatStoreNV(o[f], part_o, slot0 * RANK + (s * FO + f) * 16, pc.splits * RANK, false);
  if (lid < 128 && lid % 8 == 0) {
    const uint slot = slot0 + (lid / 8) * pc.splits;
    part_ml[slot * 2] = m;
    part_ml[slot * 2 + 1] = l;
  }
}
