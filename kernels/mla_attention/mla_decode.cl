// mla_decode on OpenCL C 1.2: three kernels of one program (see opencl.cpp for the plan).
//
// Compile-time (-D): THREADS (work-items per group), HG (heads per group), BLOCK_N (cache rows
// per staged tile), RANK (kv_lora_rank), ROPE (rope_dim), ROWS (sequences of an absorb or
// combine group), AC (latent columns of an absorb group, dividing THREADS), VC (columns of out
// of a combine group, dividing THREADS), STAGE16 (1: the storage is 16-bit and tiles are staged
// as stored, half the local memory of f32, so twice the heads or rows fit).
// Everything else is a kernel argument, the storage dtype included (0 f32, 1 f16, 2 bf16), so
// one program serves f16 and bf16.
// Buffers of the storage dtype are passed as 16-bit words (read as floats where f32) and go
// through common/clc.h's codecs; all arithmetic is f32.

#include "common/clc.h"

#define WIDTH (RANK + ROPE)      // a cache row: c_kv | k_pe
#if STAGE16
#define STRIDE (WIDTH + 2)       // staged rows, padded by one 32-bit word so that neighbouring rows
                                 // start on other banks
#else
#define STRIDE (WIDTH + 1)
#endif
#define PAIRS (HG * BLOCK_N)     // (head, row) scores per tile
#if THREADS >= PAIRS
#define TEAM (THREADS / PAIRS)   // work-items sharing one score
#else
#define TEAM 1
#endif
#define COLS EJK_CEIL_DIV(RANK, THREADS)  // o_lat columns per work-item
#define LOG2E 1.4426950408889634f

// Element i of a weight of the storage dtype, loaded without a branch on the dtype (ejk_load's
// branches keep the loads of an unrolled loop from being in flight together).
#if STAGE16
float load_w(const __global ushort* p, int i, int dtype) {
  // Both readings of the one element (a second load of it is a cache hit), then one chosen.
  const float f16 = vload_half(i, (const __global half*)p), bf16 = ejk_bf16_to_f32(p[i]);
  return dtype == 1 ? f16 : bf16;
}
#else
float load_w(const __global ushort* p, int i, int dtype) { return ((const __global float*)p)[i]; }
#endif

// qs[bh] = softmax_scale * log2(e) * [q_nope[bh] . w_kc[h] | q_pe[bh]]. One group per (32 latent
// columns, head, ROWS sequences): each of the group's THREADS / 32 warps-worth of work-items sums
// 16 rows of w_kc of each chunk of nope_dim (short chains of loads, many groups; a work-item's
// elements of w_kc read once for ROWS sequences), and the slices' sums meet in local memory in
// a fixed order.
#define SL (THREADS / AC)        // slices of nope_dim a chunk
#define DCH (16 * SL)            // nope_dim columns a chunk
__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void mla_absorb(
    const __global ushort* qn16, const __global ushort* qp16, const __global ushort* wk16, __global float* qs, int batch,
    int heads, int nope_dim, float scale, int dtype) {
  const int lid = get_local_id(0), col = lid % AC, sl = lid / AC, c = get_group_id(0) * AC + col;
  const int h = get_group_id(1), b0 = get_group_id(2) * ROWS, rows = min(ROWS, batch - b0);
  __local float q[ROWS * DCH];
  __local float red[SL * ROWS * AC];
  float acc[ROWS];
  for (int r = 0; r < ROWS; ++r) acc[r] = 0.f;
  for (int d0 = 0; d0 < nope_dim; d0 += DCH) {
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = lid; e < ROWS * DCH; e += THREADS) {
      const int r = e / DCH, d = d0 + e - r * DCH;
      q[e] = r < rows && d < nope_dim ? ejk_load(qn16, ((b0 + r) * heads + h) * nope_dim + d, dtype) : 0.f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int dq = sl * 16 + i, d = d0 + dq;
      if (c < RANK && d < nope_dim) {
        const float w = load_w(wk16, (h * nope_dim + d) * RANK + c, dtype);
        for (int r = 0; r < ROWS; ++r) acc[r] = mad(q[r * DCH + dq], w, acc[r]);
      }
    }
  }
  for (int r = 0; r < ROWS; ++r) red[(sl * ROWS + r) * AC + col] = acc[r];
  barrier(CLK_LOCAL_MEM_FENCE);
  const float s = scale * LOG2E;
  for (int e = lid; e < rows * AC; e += THREADS) {
    const int r = e / AC, cc = get_group_id(0) * AC + e - r * AC;
    float sum = 0.f;
    for (int i = 0; i < SL; ++i) sum += red[(i * ROWS + r) * AC + e - r * AC];
    if (cc < RANK) qs[((b0 + r) * heads + h) * WIDTH + cc] = sum * s;
  }
  if (get_group_id(0) == 0)
    for (int e = lid; e < rows * ROPE; e += THREADS) {
      const int r = e / ROPE, bh = (b0 + r) * heads + h;
      qs[bh * WIDTH + RANK + e - r * ROPE] = s * ejk_load(qp16, bh * ROPE + e - r * ROPE, dtype);
    }
}

// One group per (part of the context, group of HG heads, sequence): tiles of BLOCK_N cache rows
// are staged once in local memory and serve every head of the group. Writes the part's
// unnormalised o_lat and its running max and sum (log2 domain) per head.
__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void mla_attend(
    const __global float* qs, const __global ushort* kv16, const __global int* block_tables,
    const __global int* context_lens, __global float* part_o, __global float* part_ml, int heads, int block_size,
    int max_blocks, int splits, int dtype) {
  const int split = get_group_id(0), h0 = get_group_id(1) * HG, b = get_group_id(2), lid = get_local_id(0);
  __local float q_s[HG * WIDTH];
#if STAGE16
  __local ushort kv_s[BLOCK_N * STRIDE];
#define KV(i) (dtype == 1 ? vload_half((i), (const __local half*)kv_s) : ejk_bf16_to_f32(kv_s[i]))
#else
  __local float kv_s[BLOCK_N * STRIDE];
#define KV(i) kv_s[i]
#endif
  __local float p_s[PAIRS];
  __local float red[THREADS];
  __local float m_s[HG], l_s[HG], a_s[HG];

  for (int e = lid; e < HG * WIDTH; e += THREADS) q_s[e] = qs[(b * heads + h0) * WIDTH + e];
  if (lid < HG) {
    m_s[lid] = -INFINITY;
    l_s[lid] = 0.f;
  }
  float acc[HG][COLS];
  for (int k = 0; k < HG; ++k)
    for (int i = 0; i < COLS; ++i) acc[k][i] = 0.f;

  const int n = context_lens[b];
  const int per = EJK_CEIL_DIV(n, splits);
  const int chunk = EJK_ROUND_UP(per, BLOCK_N);
  const int start = min(n, split * chunk), end = min(n, start + chunk);
  barrier(CLK_LOCAL_MEM_FENCE);

  for (int t0 = start; t0 < end; t0 += BLOCK_N) {
    // block_size is a multiple of BLOCK_N and t0 of BLOCK_N: the tile lies within one page.
    const int page = block_tables[b * max_blocks + t0 / block_size];
    const int base = (page * block_size + t0 % block_size) * WIDTH;
    const int rows = min(BLOCK_N, end - t0);
    for (int e = lid; e < BLOCK_N * WIDTH; e += THREADS) {
      const int j = e / WIDTH, c = e - j * WIDTH;
#if STAGE16
      kv_s[j * STRIDE + c] = j < rows ? kv16[base + e] : (ushort)0;
#else
      kv_s[j * STRIDE + c] = j < rows ? ejk_load(kv16, base + e, dtype) : 0.f;
#endif
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    // Scores: TEAM work-items per (head, row), each over a strided slice of the row.
#if THREADS >= PAIRS
    {
      const int pair = lid / TEAM, lane = lid - pair * TEAM;
      const int k = pair / BLOCK_N, j = pair - k * BLOCK_N;
      float dot = 0.f;
      for (int c = lane; c < WIDTH; c += TEAM) dot = mad(q_s[k * WIDTH + c], KV(j * STRIDE + c), dot);
      red[lid] = dot;
      barrier(CLK_LOCAL_MEM_FENCE);
      if (lane == 0 && pair < PAIRS) {
        float sum = 0.f;
        for (int i = 0; i < TEAM; ++i) sum += red[lid + i];
        p_s[pair] = j < rows ? sum : -INFINITY;
      }
    }
#else
    for (int pair = lid; pair < PAIRS; pair += THREADS) {
      const int k = pair / BLOCK_N, j = pair - k * BLOCK_N;
      float dot = 0.f;
      for (int c = 0; c < WIDTH; ++c) dot = mad(q_s[k * WIDTH + c], KV(j * STRIDE + c), dot);
      p_s[pair] = j < rows ? dot : -INFINITY;
    }
#endif
    barrier(CLK_LOCAL_MEM_FENCE);

    // Online softmax, one work-item per head.
    if (lid < HG) {
      const float m_old = m_s[lid];
      float mx = m_old;
      for (int j = 0; j < BLOCK_N; ++j) mx = fmax(mx, p_s[lid * BLOCK_N + j]);
      float sum = 0.f;
      for (int j = 0; j < BLOCK_N; ++j) {
        const float pj = exp2(p_s[lid * BLOCK_N + j] - mx);
        p_s[lid * BLOCK_N + j] = pj;
        sum += pj;
      }
      const float alpha = exp2(m_old - mx);
      l_s[lid] = l_s[lid] * alpha + sum;
      m_s[lid] = mx;
      a_s[lid] = alpha;
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    for (int i = 0; i < COLS; ++i) {
      const int c = lid + i * THREADS;
      if (c < RANK) {
        for (int k = 0; k < HG; ++k) {
          float a = acc[k][i] * a_s[k];
          for (int j = 0; j < BLOCK_N; ++j) a = mad(p_s[k * BLOCK_N + j], KV(j * STRIDE + c), a);
          acc[k][i] = a;
        }
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }

  for (int k = 0; k < HG; ++k) {
    const int slot = (b * heads + h0 + k) * splits + split;
    for (int i = 0; i < COLS; ++i) {
      const int c = lid + i * THREADS;
      if (c < RANK) part_o[slot * RANK + c] = acc[k][i];
    }
    if (lid == 0) {
      part_ml[slot * 2] = m_s[k];
      part_ml[slot * 2 + 1] = l_s[k];
    }
  }
}

// One group per (head, ROWS sequences, VC columns of out): each sequence's parts merged by their
// log-sum-exp into o_lat (local memory), then out = o_lat . w_vc[h] for the group's columns, a
// work-item's elements of w_vc read once for the group's ROWS sequences and each column summed by
// THREADS / VC work-items over slices of the latent rank (short chains of loads of w_vc, many
// groups). Context 0 leaves every part empty (sum 0) and gives 0.
__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void mla_combine(
    const __global float* part_o, const __global float* part_ml, const __global ushort* wv16,
    __global ushort* out16, int batch, int heads, int splits, int v_dim, int dtype) {
  const int h = get_group_id(0), b0 = get_group_id(1) * ROWS, lid = get_local_id(0), rows = min(ROWS, batch - b0);
  __local float o_s[ROWS * RANK];
  __local float red[ROWS * THREADS];
  // Each sequence's parts' weights exp2(m - max) / sum into red (splits <= THREADS): 0 for an
  // empty part, whose o_lat the attend pass wrote as zeros, so the merge below needs no branch
  // and its loads of part_o are in flight together.
  if (lid < rows) {
    const int bh = (b0 + lid) * heads + h;
    float mx = -INFINITY;
    for (int s = 0; s < splits; ++s) mx = fmax(mx, part_ml[(bh * splits + s) * 2]);
    float total = 0.f;
    for (int s = 0; s < splits; ++s) {
      const float l = part_ml[(bh * splits + s) * 2 + 1];
      if (l > 0.f) total += exp2(part_ml[(bh * splits + s) * 2] - mx) * l;
    }
    const float inv = total > 0.f ? 1.f / total : 0.f;
    for (int s = 0; s < splits; ++s) {
      const float l = part_ml[(bh * splits + s) * 2 + 1];
      red[lid * splits + s] = l > 0.f ? exp2(part_ml[(bh * splits + s) * 2] - mx) * inv : 0.f;
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  // Rows past the batch are zeros: the projection below runs over every row of o_s.
  for (int e = lid; e < ROWS * RANK; e += THREADS) {
    const int r = e / RANK, c = e - r * RANK;
    float o = 0.f;
    if (r < rows) {
      const __global float* po = part_o + (size_t)((b0 + r) * heads + h) * splits * RANK + c;
#pragma unroll 8
      for (int s = 0; s < splits; ++s) o = mad(red[r * splits + s], po[s * RANK], o);
    }
    o_s[e] = o;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const int team = THREADS / VC, part = lid / VC, dl = lid - part * VC, d = get_group_id(2) * VC + dl;
  const int c0 = part * RANK / team, c1 = (part + 1) * RANK / team;
  float o[ROWS];
  for (int r = 0; r < ROWS; ++r) o[r] = 0.f;
  if (d < v_dim)
#pragma unroll 8
    for (int c = c0; c < c1; ++c) {
      const float w = load_w(wv16, (h * RANK + c) * v_dim + d, dtype);
      for (int r = 0; r < ROWS; ++r) o[r] = mad(o_s[r * RANK + c], w, o[r]);
    }
  for (int r = 0; r < ROWS; ++r) red[r * THREADS + lid] = o[r];
  barrier(CLK_LOCAL_MEM_FENCE);
  if (part == 0 && d < v_dim)
    for (int r = 0; r < rows; ++r) {
      float sum = 0.f;
      for (int i = 0; i < team; ++i) sum += red[r * THREADS + dl + i * VC];
      ejk_store(out16, ((b0 + r) * heads + h) * v_dim + d, dtype, sum);
    }
}
