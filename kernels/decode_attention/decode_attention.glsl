// The decode engine on Vulkan (decode_attention/engine.hpp has the semantics), included by
// decode_attention_<pass>[16].comp with PASS (DA_PARTIAL, DA_REDUCE) and ELEM16 (0: every float
// array f32; 1: 16-bit storage, f32/f16/bf16 by push constant). The same design as
// decode_attention.cl: pass 1 per workgroup (split, kv head, query block) stages the query rows,
// then for each tile of BK keys resolves the rows' addresses (block table or contiguous), stages
// K and V as f32, scores, updates running max and sum (base 2), and accumulates P V in registers;
// pass 2 merges the splits by log-sum-exp. Geometry is specialization constants, everything
// else push constants, so one pipeline serves every dtype and shape of a config. Invocation i
// owns the four-element output groups i, i + T, ... of the R x DMAX block.
#extension GL_EXT_control_flow_attributes : require
#if ELEM16
#extension GL_EXT_shader_16bit_storage : require
#endif
#include "common/vulkan.glsl"

#define DA_PARTIAL 0
#define DA_REDUCE 1

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

layout(constant_id = 3) const uint T = 128;    // invocations (= local size x)
layout(constant_id = 4) const uint BK = 32;    // keys per tile
layout(constant_id = 5) const uint R = 4;      // query rows per workgroup
layout(constant_id = 6) const uint BQ = 1;     // query tokens per workgroup
layout(constant_id = 7) const uint DMAX = 128; // head_dim rounded up to 32, 64, 128, 256

const uint D4 = DMAX / 4u;
const uint KS4 = D4 + 1u;
const uint ACC4 = EJK_CEIL_DIV(R * D4, T);  // four-element accumulators per invocation
const uint SS = BK + 1;
const float NEG = -1.0e30;
const float LOG2E = 1.44269504088896340736;

const uint F_PAGED = 1u, F_BEGIN = 2u, F_VARLEN = 4u, F_SINKS = 8u;

layout(push_constant) uniform Push {
  uint dtype, sinks_dtype, flags, num_seqs;
  uint tokens, heads, kv_heads, head_dim;
  uint block_size, max_blocks, num_blocks, seq_len;
  uint splits;
  int window;
  float qscale, cap2;
  uint group_offset;  // first workgroup along the split dimension (z of pass 1, y of pass 2)
} pc;

bool flag(uint f) { return (pc.flags & f) != 0u; }

// q k v tables kv_begin kv_end q_loc sinks out | part_acc part_ml
layout(binding = 0) readonly buffer QF { float q_f[]; };
layout(binding = 1) readonly buffer KF { float k_f[]; };
layout(binding = 2) readonly buffer VF { float v_f[]; };
layout(binding = 3) readonly buffer Tables { int tables[]; };
layout(binding = 4) readonly buffer Begin { int kv_begin[]; };
layout(binding = 5) readonly buffer End { int kv_end[]; };
layout(binding = 6) readonly buffer QLoc { int q_loc[]; };
layout(binding = 7) readonly buffer SinksF { float sinks_f[]; };
layout(binding = 8) buffer OutF { float out_f[]; };
layout(binding = 9) buffer PartAcc { float part_acc[]; };
layout(binding = 10) buffer PartMl { float part_ml[]; };
// Queries, keys and values four elements at a time (index = element / 4, where head_dim % 4 == 0).
layout(binding = 0) readonly buffer QF4 { vec4 q_f4[]; };
layout(binding = 1) readonly buffer KF4 { vec4 k_f4[]; };
layout(binding = 2) readonly buffer VF4 { vec4 v_f4[]; };
#if ELEM16
layout(binding = 0) readonly buffer QU2 { uvec2 q_u2[]; };
layout(binding = 1) readonly buffer KU2 { uvec2 k_u2[]; };
layout(binding = 2) readonly buffer VU2 { uvec2 v_u2[]; };
layout(binding = 0) readonly buffer QH { uint16_t q_h[]; };
layout(binding = 1) readonly buffer KH { uint16_t k_h[]; };
layout(binding = 2) readonly buffer VH { uint16_t v_h[]; };
layout(binding = 7) readonly buffer SinksH { uint16_t sinks_h[]; };
layout(binding = 8) buffer OutH { uint16_t out_h[]; };

#define LOAD(name, i, dt) ((dt) == 0u ? name##_f[i] : EJK_LD16(name##_h, i, dt))
#define LOAD4(name, i4, dt) ((dt) == 0u ? name##_f4[i4] : ejk_decode16x4(name##_u2[i4], (dt)))
#define STORE(name, i, dt, x)        \
  if ((dt) == 0u) name##_f[i] = (x); \
  else EJK_ST16(name##_h, i, dt, x)
#else
#define LOAD(name, i, dt) (name##_f[i])
#define LOAD4(name, i4, dt) (name##_f4[i4])
#define STORE(name, i, dt, x) name##_f[i] = (x)
#endif

#if PASS == DA_PARTIAL

// Rows of four elements: every shared read and write is a vec4, and with an odd vec4 stride
// the eight invocations of a quarter-warp reading eight key rows hit distinct banks.
shared vec4 qs[R * D4];
shared vec4 ks[BK * KS4];
shared vec4 vs[BK * D4];
shared float ss[R * SS];
shared float m_row[R], l_row[R], alpha[R];
shared int lo_row[R], hi_row[R];
shared int key_at[BK];  // first element of each key row of the tile, -1 past the chunk

// Four consecutive elements of a row from element i (zeros past D): one vector load where D is a
// multiple of 4 (rows then start at multiples of 4), else element by element.
#define LOAD_QUAD(name, i, d, x)                                              \
  if ((pc.head_dim & 3u) == 0u) {                                            \
    x = LOAD4(name, (i) / 4u, pc.dtype);                                     \
  } else {                                                                   \
    for (uint c_ = 0u; c_ < 4u; ++c_)                                        \
      if ((d) + c_ < pc.head_dim) x[c_] = LOAD(name, (i) + c_, pc.dtype);    \
  }

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint split = gl_WorkGroupID.x, g = gl_WorkGroupID.y, blk = gl_WorkGroupID.z + pc.group_offset;
  const uint G = pc.heads / pc.kv_heads, D = pc.head_dim;
  int s, t0, nq, qlen;
  if (!flag(F_VARLEN)) {
    s = int(blk);
    t0 = s;
    nq = 1;
    qlen = 1;
    if (s >= int(pc.num_seqs)) return;
  } else {
    // Sequence s owns the blocks from q_loc[s] / BQ + s on: the largest s whose first is <= blk.
    int lo = 0, hi = int(pc.num_seqs) - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (q_loc[mid] / int(BQ) + mid <= int(blk)) lo = mid;
      else hi = mid - 1;
    }
    s = lo;
    const int first = q_loc[s] / int(BQ) + s;
    t0 = q_loc[s] + (int(blk) - first) * int(BQ);
    const int end = q_loc[s + 1];
    if (int(blk) < first || t0 >= end) return;
    nq = min(int(BQ), end - t0);
    qlen = end - q_loc[s];
  }
  const int kve = kv_end[s];
  const int kvb = flag(F_BEGIN) ? kv_begin[s] : 0;
  const int i0 = t0 - (flag(F_VARLEN) ? q_loc[s] : s);
  const uint nd4 = (D + 3u) / 4u;

  for (uint r = tid; r < R; r += T) {
    const int qi = int(r / G);
    const int pos = kve - qlen + i0 + qi;
    const bool valid = qi < nq;
    lo_row[r] = valid ? (pc.window > 0 ? max(kvb, pos - pc.window + 1) : kvb) : 0;
    hi_row[r] = valid ? pos + 1 : 0;
    m_row[r] = NEG;
    l_row[r] = 0.0;
  }
  for (uint e = tid; e < R * D4; e += T) {
    const uint r = e / D4, d = (e % D4) * 4u;
    const int qi = int(r / G);
    const uint h = g * G + r % G;
    vec4 x = vec4(0.0);
    if (qi < nq && d < D) {
      LOAD_QUAD(q, (uint(t0 + qi) * pc.heads + h) * D + d, d, x)
    }
    qs[e] = x * pc.qscale;
  }
  barrier();
  // lo and hi grow with the token, so the first and last rows bound the block's keys.
  const int u0 = lo_row[0], u1 = hi_row[uint(nq - 1) * G];
  const int span = max(0, u1 - u0);
  const int chunk = EJK_ROUND_UP(EJK_CEIL_DIV(span, int(pc.splits)), int(BK));
  const int c0 = u0 + int(split) * chunk, c1 = min(c0 + chunk, u1);

  vec4 acc[ACC4];
  [[unroll]] for (uint i = 0; i < ACC4; ++i) acc[i] = vec4(0.0);

  for (int base = c0; base < c1; base += int(BK)) {
    if (tid < BK) {
      const int t = base + int(tid);
      int at = -1;
      if (t < c1) {
        // Unchecked index arrays (the API's check_indices off) stay inside the table and the cache.
        const uint tc = uint(clamp(t, 0, int(flag(F_PAGED) ? pc.max_blocks * pc.block_size : pc.seq_len) - 1));
        if (flag(F_PAGED)) {
          const int page = clamp(tables[uint(s) * pc.max_blocks + tc / pc.block_size], 0, int(pc.num_blocks) - 1);
          at = int(((uint(page) * pc.kv_heads + g) * pc.block_size + tc % pc.block_size) * D);
        } else {
          at = int(((uint(s) * pc.seq_len + tc) * pc.kv_heads + g) * D);
        }
      }
      key_at[tid] = at;
    }
    barrier();
    for (uint e = tid; e < BK * D4; e += T) {
      const uint j = e / D4, d4 = e % D4, d = d4 * 4u;
      const int at = key_at[j];
      vec4 kx = vec4(0.0), vx = vec4(0.0);
      if (at >= 0 && d < D) {
        LOAD_QUAD(k, uint(at) + d, d, kx)
        LOAD_QUAD(v, uint(at) + d, d, vx)
      }
      ks[j * KS4 + d4] = kx;
      vs[e] = vx;
    }
    barrier();
    for (uint e = tid; e < R * BK; e += T) {
      const uint r = e / BK, j = e % BK;
      const int t = base + int(j);
      float z = NEG;
      if (t >= lo_row[r] && t < hi_row[r]) {
        vec4 x = vec4(0.0);
        for (uint d4 = 0; d4 < nd4; ++d4) x = fma(qs[r * D4 + d4], ks[j * KS4 + d4], x);
        const float u = (x.x + x.y) + (x.z + x.w);
        z = pc.cap2 > 0.0 ? pc.cap2 * tanh(u) : u;
      }
      ss[r * SS + j] = z;
    }
    barrier();
    for (uint r = tid; r < R; r += T) {
      float mx = NEG;
      for (uint j = 0; j < BK; ++j) mx = max(mx, ss[r * SS + j]);
      const float mn = max(m_row[r], mx);
      const float a = exp2(m_row[r] - mn);
      float sum = 0.0;
      for (uint j = 0; j < BK; ++j) {
        const float z = ss[r * SS + j];
        const float p = z <= NEG * 0.5 ? 0.0 : exp2(z - mn);
        ss[r * SS + j] = p;
        sum += p;
      }
      l_row[r] = l_row[r] * a + sum;
      m_row[r] = mn;
      alpha[r] = a;
    }
    barrier();
    [[unroll]] for (uint i = 0; i < ACC4; ++i) {
      const uint o = tid + i * T;
      if (o < R * D4) {
        const uint r = o / D4, d4 = o % D4;
        vec4 x = acc[i] * alpha[r];
        for (uint j = 0; j < BK; ++j) x = fma(vec4(ss[r * SS + j]), vs[j * D4 + d4], x);
        acc[i] = x;
      }
    }
    barrier();
  }
  [[unroll]] for (uint i = 0; i < ACC4; ++i) {
    const uint o = tid + i * T;
    if (o < R * D4) {
      const uint r = o / D4, d = (o % D4) * 4u;
      const int qi = int(r / G);
      if (qi < nq && d < D) {
        const uint dst = ((uint(t0 + qi) * pc.heads + g * G + r % G) * pc.splits + split) * D + d;
        for (uint c = 0u; c < 4u; ++c)
          if (d + c < D) part_acc[dst + c] = acc[i][c];
      }
    }
  }
  for (uint r = tid; r < R; r += T) {
    const int qi = int(r / G);
    if (qi < nq) {
      const uint at = (uint(t0 + qi) * pc.heads + g * G + r % G) * pc.splits + split;
      part_ml[2u * at] = m_row[r];
      part_ml[2u * at + 1u] = l_row[r];
    }
  }
}

#elif PASS == DA_REDUCE

// Invocation (d, row = token * heads + head): merge the splits by log-sum-exp.
void main() {
  const uint d = gl_GlobalInvocationID.x;
  const uint row = gl_WorkGroupID.y + pc.group_offset;
  const uint D = pc.head_dim;
  if (d >= D) return;
  const uint owned = flag(F_VARLEN) ? uint(q_loc[pc.num_seqs]) : pc.tokens;
  if (row >= owned * pc.heads) return;
  const uint h = row % pc.heads;
  const uint base = row * pc.splits;
  const float sink = flag(F_SINKS) ? LOAD(sinks, h, pc.sinks_dtype) * LOG2E : NEG;
  float M = sink;
  for (uint c = 0; c < pc.splits; ++c) M = max(M, part_ml[2u * (base + c)]);
  float L = flag(F_SINKS) ? exp2(sink - M) : 0.0, a = 0.0;
  for (uint c = 0; c < pc.splits; ++c) {
    const float w = exp2(part_ml[2u * (base + c)] - M);
    L += part_ml[2u * (base + c) + 1u] * w;
    a += part_acc[(base + c) * D + d] * w;
  }
  // No key seen: a is 0 whatever L holds (a sink alone).
  STORE(out, row * D + d, pc.dtype, L > 0.0 ? a / L : 0.0);
}

#endif
