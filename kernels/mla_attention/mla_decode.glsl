// mla_decode on Vulkan: the three passes of mla_decode.cl (see vulkan.cpp for the plan), one
// module each, included with PASS and ELEM16 set (0: f32 arrays; 1: f16 or bf16 arrays through
// 16-bit storage, DTYPE picking which). Tile geometry and the latent widths are specialization
// constants; the dtype, head counts, table geometry and the number of parts are push constants.
#extension GL_EXT_control_flow_attributes : require
#if ELEM16
#extension GL_EXT_shader_16bit_storage : require
#endif
#include "common/vulkan.glsl"

#define MLA_ABSORB 0
#define MLA_ATTEND 1
#define MLA_COMBINE 2

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
layout(constant_id = 3) const uint HG = 4;        // heads per group
layout(constant_id = 4) const uint BLOCK_N = 16;  // cache rows per staged tile
layout(constant_id = 5) const uint RANK = 64;     // kv_lora_rank
layout(constant_id = 6) const uint ROPE = 16;     // rope_dim
// 1 (16-bit modules, even row width): tiles are staged as stored, two elements a word, half the
// shared memory of f32, so twice the heads or rows fit.
layout(constant_id = 7) const uint STAGE16 = 0;
// Sequences of an absorb or combine group, latent columns of an absorb group and columns of out
// of a combine group (AC and VC divide the workgroup size).
layout(constant_id = 8) const uint ROWS = 1;
layout(constant_id = 9) const uint AC = 32;
layout(constant_id = 10) const uint VC = 32;

const uint THREADS = gl_WorkGroupSize.x;
const uint WIDTH = RANK + ROPE;   // a cache row: c_kv | k_pe
const uint STRIDE = WIDTH + 1;    // staged rows, padded so neighbouring rows start on other banks
const uint PAIRS = HG * BLOCK_N;  // (head, row) scores per tile
const uint TEAM = THREADS >= PAIRS ? THREADS / PAIRS : 1;
const uint COLS = EJK_CEIL_DIV(RANK, THREADS);  // o_lat columns per invocation
const float LOG2E = 1.4426950408889634;
#define NEG_INF uintBitsToFloat(0xff800000u)

layout(push_constant) uniform Push {
  uint heads, nope_dim, block_size, max_blocks;
  uint splits, v_dim, dtype;
  float scale;
  uint batch;
} pc;

#if ELEM16
#define ELEM uint16_t
#define LOAD(a, i) EJK_LD16(a, i, pc.dtype)
#define STORE(a, i, x) EJK_ST16(a, i, pc.dtype, x)
#else
#define ELEM float
#define LOAD(a, i) a[i]
#define STORE(a, i, x) a[i] = (x)
#endif

#if PASS == MLA_ABSORB
// qs[bh] = softmax_scale * log2(e) * [q_nope[bh] . w_kc[h] | q_pe[bh]]. One group per (AC latent
// columns, head, ROWS sequences): each of the group's THREADS / AC slices sums 16 rows of w_kc
// of each chunk of nope_dim (short chains of loads, many groups; an invocation's elements of
// w_kc read once for ROWS sequences), and the slices' sums meet in shared memory in a fixed
// order.
layout(binding = 0) readonly buffer QN { ELEM q_nope[]; };
layout(binding = 1) readonly buffer QP { ELEM q_pe[]; };
layout(binding = 2) readonly buffer WK { ELEM w_kc[]; };
layout(binding = 3) writeonly buffer QS { float qs[]; };
const uint SL = THREADS / AC;  // slices of nope_dim a chunk
const uint DCH = 16 * SL;      // nope_dim columns a chunk
shared float q[ROWS * DCH];
shared float red[SL * ROWS * AC];

void main() {
  const uint lid = gl_LocalInvocationID.x, col = lid % AC, sl = lid / AC, c = gl_WorkGroupID.x * AC + col;
  const uint h = gl_WorkGroupID.y, b0 = gl_WorkGroupID.z * ROWS, rows = min(ROWS, pc.batch - b0);
  float acc[ROWS];
  [[unroll]] for (uint r = 0; r < ROWS; ++r) acc[r] = 0.0;
  for (uint d0 = 0; d0 < pc.nope_dim; d0 += DCH) {
    barrier();
    for (uint e = lid; e < ROWS * DCH; e += THREADS) {
      const uint r = e / DCH, d = d0 + e - r * DCH;
      q[e] = r < rows && d < pc.nope_dim ? LOAD(q_nope, ((b0 + r) * pc.heads + h) * pc.nope_dim + d) : 0.0;
    }
    barrier();
    [[unroll]] for (uint i = 0; i < 16; ++i) {
      const uint dq = sl * 16 + i, d = d0 + dq;
      if (c < RANK && d < pc.nope_dim) {
        const float w = LOAD(w_kc, (h * pc.nope_dim + d) * RANK + c);
        [[unroll]] for (uint r = 0; r < ROWS; ++r) acc[r] = fma(q[r * DCH + dq], w, acc[r]);
      }
    }
  }
  [[unroll]] for (uint r = 0; r < ROWS; ++r) red[(sl * ROWS + r) * AC + col] = acc[r];
  barrier();
  const float s = pc.scale * LOG2E;
  for (uint e = lid; e < rows * AC; e += THREADS) {
    const uint r = e / AC, cc = gl_WorkGroupID.x * AC + e - r * AC;
    float sum = 0.0;
    for (uint i = 0; i < SL; ++i) sum += red[(i * ROWS + r) * AC + e - r * AC];
    if (cc < RANK) qs[((b0 + r) * pc.heads + h) * WIDTH + cc] = sum * s;
  }
  if (gl_WorkGroupID.x == 0)
    for (uint e = lid; e < rows * ROPE; e += THREADS) {
      const uint r = e / ROPE, bh = (b0 + r) * pc.heads + h;
      qs[bh * WIDTH + RANK + e - r * ROPE] = s * LOAD(q_pe, bh * ROPE + e - r * ROPE);
    }
}

#elif PASS == MLA_ATTEND
// One group per (part of the context, group of HG heads, sequence): tiles of BLOCK_N cache rows
// are staged once in shared memory and serve every head of the group. Writes the part's
// unnormalised o_lat and its running max and sum (log2 domain) per head.
layout(binding = 0) readonly buffer QS { float qs[]; };
layout(binding = 1) readonly buffer KV { ELEM kv[]; };
#if ELEM16
layout(binding = 1) readonly buffer KVW { uint kv_words[]; };
#endif
layout(binding = 2) readonly buffer Tables { int block_tables[]; };
layout(binding = 3) readonly buffer Lens { int context_lens[]; };
layout(binding = 4) writeonly buffer PartO { float part_o[]; };
layout(binding = 5) writeonly buffer PartML { float part_ml[]; };

shared float q_s[HG * WIDTH];
const uint SW = WIDTH / 2 + 1;  // words per staged 16-bit row (one word of padding)
shared float kv_s[STAGE16 != 0 ? 1 : BLOCK_N * STRIDE];
shared uint kv_w[STAGE16 != 0 ? BLOCK_N * SW : 1];

// Element c of staged row j.
float staged(uint j, uint c) {
#if ELEM16
  if (STAGE16 != 0) {
    const uint w = kv_w[j * SW + c / 2];
    return ejk_decode16((c & 1u) != 0u ? w >> 16 : w, pc.dtype);
  }
#endif
  return kv_s[j * STRIDE + c];
}
shared float p_s[PAIRS];
shared float red[THREADS];
shared float m_s[HG], l_s[HG], a_s[HG];

void main() {
  const uint split = gl_WorkGroupID.x, h0 = gl_WorkGroupID.y * HG, b = gl_WorkGroupID.z, lid = gl_LocalInvocationID.x;
  for (uint e = lid; e < HG * WIDTH; e += THREADS) q_s[e] = qs[(b * pc.heads + h0) * WIDTH + e];
  if (lid < HG) {
    m_s[lid] = NEG_INF;
    l_s[lid] = 0.0;
  }
  float acc[HG * COLS];
  [[unroll]] for (uint i = 0; i < HG * COLS; ++i) acc[i] = 0.0;

  const int n = context_lens[b];
  const int per = EJK_CEIL_DIV(n, int(pc.splits));
  const int chunk = EJK_ROUND_UP(per, int(BLOCK_N));
  const int start = min(n, int(split) * chunk), end = min(n, start + chunk);
  barrier();

  for (int t0 = start; t0 < end; t0 += int(BLOCK_N)) {
    // block_size is a multiple of BLOCK_N and t0 of BLOCK_N: the tile lies within one page.
    const int page = block_tables[b * pc.max_blocks + uint(t0) / pc.block_size];
    const uint base = (uint(page) * pc.block_size + uint(t0) % pc.block_size) * WIDTH;
    const uint rows = uint(min(int(BLOCK_N), end - t0));
#if ELEM16
    if (STAGE16 != 0) {
      // Rows are contiguous within the page and WIDTH is even: the tile is whole words.
      for (uint e = lid; e < BLOCK_N * (WIDTH / 2); e += THREADS) {
        const uint j = e / (WIDTH / 2), w = e - j * (WIDTH / 2);
        kv_w[j * SW + w] = j < rows ? kv_words[base / 2 + e] : 0u;
      }
    } else
#endif
    for (uint e = lid; e < BLOCK_N * WIDTH; e += THREADS) {
      const uint j = e / WIDTH, c = e - j * WIDTH;
      kv_s[j * STRIDE + c] = j < rows ? LOAD(kv, base + e) : 0.0;
    }
    barrier();

    // Scores: TEAM invocations per (head, row), each over a strided slice of the row.
    if (THREADS >= PAIRS) {
      const uint pair = lid / TEAM, lane = lid - pair * TEAM;
      const uint k = pair / BLOCK_N, j = pair - k * BLOCK_N;
      float dot = 0.0;
      for (uint c = lane; c < WIDTH; c += TEAM) dot = fma(q_s[k * WIDTH + c], staged(j, c), dot);
      red[lid] = dot;
      barrier();
      if (lane == 0 && pair < PAIRS) {
        float sum = 0.0;
        for (uint i = 0; i < TEAM; ++i) sum += red[lid + i];
        p_s[pair] = j < rows ? sum : NEG_INF;
      }
    } else {
      for (uint pair = lid; pair < PAIRS; pair += THREADS) {
        const uint k = pair / BLOCK_N, j = pair - k * BLOCK_N;
        float dot = 0.0;
        for (uint c = 0; c < WIDTH; ++c) dot = fma(q_s[k * WIDTH + c], staged(j, c), dot);
        p_s[pair] = j < rows ? dot : NEG_INF;
      }
    }
    barrier();

    // Online softmax, one invocation per head.
    if (lid < HG) {
      const float m_old = m_s[lid];
      float mx = m_old;
      for (uint j = 0; j < BLOCK_N; ++j) mx = max(mx, p_s[lid * BLOCK_N + j]);
      float sum = 0.0;
      for (uint j = 0; j < BLOCK_N; ++j) {
        const float pj = exp2(p_s[lid * BLOCK_N + j] - mx);
        p_s[lid * BLOCK_N + j] = pj;
        sum += pj;
      }
      const float alpha = exp2(m_old - mx);
      l_s[lid] = l_s[lid] * alpha + sum;
      m_s[lid] = mx;
      a_s[lid] = alpha;
    }
    barrier();

    [[unroll]] for (uint i = 0; i < COLS; ++i) {
      const uint c = lid + i * THREADS;
      if (c < RANK) {
        [[unroll]] for (uint k = 0; k < HG; ++k) {
          float a = acc[k * COLS + i] * a_s[k];
          for (uint j = 0; j < BLOCK_N; ++j) a = fma(p_s[k * BLOCK_N + j], staged(j, c), a);
          acc[k * COLS + i] = a;
        }
      }
    }
    barrier();
  }

  [[unroll]] for (uint k = 0; k < HG; ++k) {
    const uint slot = (b * pc.heads + h0 + k) * pc.splits + split;
    [[unroll]] for (uint i = 0; i < COLS; ++i) {
      const uint c = lid + i * THREADS;
      if (c < RANK) part_o[slot * RANK + c] = acc[k * COLS + i];
    }
    if (lid == 0) {
      part_ml[slot * 2] = m_s[k];
      part_ml[slot * 2 + 1] = l_s[k];
    }
  }
}

#elif PASS == MLA_COMBINE
// One group per (head, ROWS sequences, VC columns of out): each sequence's parts merged by their
// log-sum-exp into o_lat (shared memory), then out = o_lat . w_vc[h] for the group's columns, an
// invocation's elements of w_vc read once for the group's ROWS sequences and each column summed
// by THREADS / VC invocations over slices of the latent rank. Context 0 leaves every part empty
// (sum 0) and gives 0.
layout(binding = 0) readonly buffer PartO { float part_o[]; };
layout(binding = 1) readonly buffer PartML { float part_ml[]; };
layout(binding = 2) readonly buffer WV { ELEM w_vc[]; };
layout(binding = 3) writeonly buffer Out { ELEM out_[]; };
shared float o_s[ROWS * RANK];
shared float red[ROWS * THREADS];

void main() {
  const uint h = gl_WorkGroupID.x, b0 = gl_WorkGroupID.y * ROWS, lid = gl_LocalInvocationID.x;
  const uint rows = min(ROWS, pc.batch - b0);
  // Each sequence's parts' weights exp2(m - max) / sum into red (splits <= THREADS): 0 for an
  // empty part, whose o_lat the attend pass wrote as zeros.
  if (lid < rows) {
    const uint bh = (b0 + lid) * pc.heads + h;
    float mx = NEG_INF;
    for (uint s = 0; s < pc.splits; ++s) mx = max(mx, part_ml[(bh * pc.splits + s) * 2]);
    float total = 0.0;
    for (uint s = 0; s < pc.splits; ++s) {
      const float l = part_ml[(bh * pc.splits + s) * 2 + 1];
      if (l > 0.0) total += exp2(part_ml[(bh * pc.splits + s) * 2] - mx) * l;
    }
    const float inv = total > 0.0 ? 1.0 / total : 0.0;
    for (uint s = 0; s < pc.splits; ++s) {
      const float l = part_ml[(bh * pc.splits + s) * 2 + 1];
      red[lid * pc.splits + s] = l > 0.0 ? exp2(part_ml[(bh * pc.splits + s) * 2] - mx) * inv : 0.0;
    }
  }
  barrier();
  // Rows past the batch are zeros: the projection below runs over every row of o_s.
  for (uint e = lid; e < ROWS * RANK; e += THREADS) {
    const uint r = e / RANK, c = e - r * RANK;
    float o = 0.0;
    if (r < rows) {
      const uint base = ((b0 + r) * pc.heads + h) * pc.splits * RANK + c;
      for (uint s = 0; s < pc.splits; ++s) o = fma(red[r * pc.splits + s], part_o[base + s * RANK], o);
    }
    o_s[e] = o;
  }
  barrier();
  const uint team = THREADS / VC, part = lid / VC, dl = lid - part * VC, d = gl_WorkGroupID.z * VC + dl;
  const uint c0 = part * RANK / team, c1 = (part + 1) * RANK / team;
  float o[ROWS];
  [[unroll]] for (uint r = 0; r < ROWS; ++r) o[r] = 0.0;
  if (d < pc.v_dim)
    for (uint c = c0; c < c1; ++c) {
      const float w = LOAD(w_vc, (h * RANK + c) * pc.v_dim + d);
      [[unroll]] for (uint r = 0; r < ROWS; ++r) o[r] = fma(o_s[r * RANK + c], w, o[r]);
    }
  [[unroll]] for (uint r = 0; r < ROWS; ++r) red[r * THREADS + lid] = o[r];
  barrier();
  if (part == 0 && d < pc.v_dim)
    for (uint r = 0; r < rows; ++r) {
      float sum = 0.0;
      for (uint i = 0; i < team; ++i) sum += red[r * THREADS + dl + i * VC];
      STORE(out_, ((b0 + r) * pc.heads + h) * pc.v_dim + d, sum);
    }
}
#endif
