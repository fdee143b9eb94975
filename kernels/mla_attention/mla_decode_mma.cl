// mla_decode's attention pass on NVIDIA tensor cores through inline PTX (common/clc_mma.h):
// mma.sync.m16n8k16 with f16 or bf16 operands and f32 accumulation. The same contract as
// mla_decode.cl's mla_attend (each part's unnormalised o_lat and its running max and sum, log2
// domain), the design of mla_decode.cu's ejk_mla_attend_mma in OpenCL C 1.2.
//
// A workgroup of NW warps takes one part of the context of one sequence for 16 heads (the m16 of
// mma.sync; heads past the last are zero rows). Tiles of BN cache rows are staged in local
// memory as stored, rows padded by 16 bytes, and serve all 16 heads: the heads are the rows of
// S = Q C^T and of O += P C[:, :RANK], so the cache is read once per workgroup.
//   S: the warps split the row's k16 steps four ways (each warp's steps of Q held as A fragments
//      in registers for the whole part) and, with 8 warps, the tile's tokens two ways; the four
//      partial sums meet in local memory.
//   softmax: 2 NW threads a head, two adjacent tokens at a time, maxima and sums by shuffles.
//   O: each warp a RANK / NW slice of the latent columns.
// Two ways to stage and read the tiles (ASYNC):
//   0: the next tile travels through registers while this one is computed (one buffer: a 32-row
//      tile of DeepSeek-V3 rows is 36 KiB of the 48 KiB), and fragments are 32-bit loads, the row
//      padding putting them in distinct banks. C is [token][column] where O's B fragment wants two
//      tokens of one column in a word: each thread reads the words of tokens 2t and 2t + 1
//      holding columns 2g and 2g + 1 and recombines their halves, which gives the B fragments of
//      two n8 tiles at once, one the even columns and one the odd; a thread's accumulators then
//      hold four adjacent columns.
//   1: tiles are copied by cp.async into a ring of STAGES buffers, the copy of tile i + STAGES - 1
//      issued before tile i is waited for, so that STAGES tiles are in flight during the wait,
//      and no registers held for them; fragments come from ldmatrix (S's B = C^T as stored, O's
//      B = C transposed, P as O's A), the 16-byte row padding (an odd number of 16-byte units a
//      row) spreading its eight row addresses over the banks. Two stages of 576-wide rows fit
//      48 KiB at 16 rows a tile. Rows past the context are zero-filled by the copy itself.
//      NVIDIA's __local pointers are shared-window addresses, so ldmatrix and cp.async take them
//      as they are; the arrays they touch are 16-byte aligned.
//
// Defines: NW (warps: 4 or 8), BN (cache rows a tile: a multiple of 16 and of 4 NW), RANK
// (kv_lora_rank: a multiple of 16 NW), ROPE (rope_dim; RANK + ROPE a multiple of 16), BF16,
// ASYNC (0 or 1, default 0) and with it STAGES (tiles in the ring, at least 2).
#include "common/clc.h"
#include "common/clc_mma.h"

#ifndef ASYNC
#define ASYNC 0
#endif

#define WIDTH (RANK + ROPE)
#define WW (WIDTH / 2)            // words a cache row
#define RSTR (WW + 4)             // local row stride of a tile in words (16 bytes of padding)
#define NT (32 * NW)              // work-items
#define KG 4                      // warps sharing a row's k16 steps
#define TG (NW / KG)              // warps sharing a tile's tokens
#define KSTEPS (WIDTH / 16)
#define QK EJK_CEIL_DIV(KSTEPS, KG)  // k16 steps of a warp
#define STILES (BN / TG / 8)      // n8 tiles of scores a warp
#define SR (BN + 8)               // local row stride of the partial scores in floats
#define TPH (NT / 16)             // softmax threads a head
#define PAIRS (BN / (2 * TPH))    // token pairs a softmax thread
#define PSTR (BN / 2 + 4)         // local row stride of P in words
#define CW (RANK / NW)            // latent columns a warp in O
#define OPAIRS (CW / 16)          // pairs of n8 tiles of O a warp
#define TASKS (BN * (WIDTH / 8))  // 16-byte copies a tile
#define FPT EJK_CEIL_DIV(TASKS, NT)

#if NW % KG || BN % (8 * TG) || BN % 16 || BN % (2 * TPH) || RANK % (16 * NW) || WIDTH % 16
#error "mla_decode_mma.cl: unsupported NW, BN, RANK or ROPE"
#endif
#if ASYNC && (!defined(STAGES) || STAGES < 2 || STILES % 2)
#error "mla_decode_mma.cl: ASYNC needs STAGES of at least 2"
#endif

#if ASYNC
#define TBYTES (BN * RSTR * 4)    // bytes a buffer of the ring

// Rows [t0, t0 + BN) of the sequence's cache, which lie in page `page`, into the buffer at local
// address `dst`; rows past `end` are zeros (masked out of the scores, and finite under P = 0).
void load_tile(uint dst, const __global ushort* kv16, int page, int block_size, int t0, int end, int tid) {
  const __global ushort* rows = kv16 + ((size_t)page * block_size + t0 % block_size) * WIDTH;
#pragma unroll
  for (int x = 0; x < FPT; ++x) {
    const int u = tid + x * NT, r = u / (WIDTH / 8), cc = u - r * (WIDTH / 8);
    if (TASKS % NT == 0 || u < TASKS) {
      const bool in = t0 + r < end;
      cp16(dst + r * (RSTR * 4) + 16 * cc, in ? rows + r * WIDTH + 8 * cc : kv16, in ? 16 : 0);
    }
  }
}
#endif

__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void mla_attend_mma(
    const __global float* qs, const __global ushort* kv16, const __global int* block_tables,
    const __global int* context_lens, __global float* part_o, __global float* part_ml, int heads, int block_size,
    int max_blocks, int splits) {
#if ASYNC
  __local uint ring[STAGES * BN * RSTR] EJK_ALIGN16;
  __local uint p_s[16 * PSTR] EJK_ALIGN16;
#else
  __local uint tile[BN * RSTR];
  __local uint p_s[16 * PSTR];
#endif
  __local float part_s[KG * 16 * SR];
  __local float alpha_s[16];

  const int split = get_group_id(0), h0 = get_group_id(1) * 16, b = get_group_id(2);
  const int tid = get_local_id(0), lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int kg = warp % KG, tg = warp / KG;
  const __global int* table = block_tables + (size_t)b * max_blocks;

  const int n = context_lens[b];
  const int chunk = EJK_ROUND_UP(EJK_CEIL_DIV(n, splits), BN);
  const int start = min(n, split * chunk), end = min(n, start + chunk);

#if ASYNC
  // Tiles 0 .. STAGES - 2 on their way before the queries are read. A group is committed for
  // every tile slot, empty past the last tile, so that CP_WAIT counts the same in every thread.
  // A tile's page is read a tile before its copy is issued, off the copy's path.
  const int tiles = EJK_CEIL_DIV(end - start, BN);
  const uint ring0 = EJK_SMEM(ring), p0s = EJK_SMEM(p_s);
  int next_page = tiles > 0 ? table[start / block_size] : 0;
#pragma unroll
  for (int i = 0; i < STAGES - 1; ++i) {
    const int page = next_page;
    next_page = i + 1 < tiles ? table[(start + (i + 1) * BN) / block_size] : 0;
    if (i < tiles) load_tile(ring0 + i * TBYTES, kv16, page, block_size, start + i * BN, end, tid);
    cp_commit();
  }
#else
  const __global uint4* kv4 = (const __global uint4*)kv16;
  // Tile rows past `end` are zeros: masked out of the scores, and finite under P = 0.
  uint4 pk[FPT];
#define FETCH(T0)                                                                                \
  {                                                                                              \
    const size_t base_ = (size_t)table[(T0) / block_size] * block_size + (T0) % block_size;     \
    _Pragma("unroll") for (int x = 0; x < FPT; ++x) {                                          \
      const int u = tid + x * NT, r = u / (WIDTH / 8), cc = u - r * (WIDTH / 8);                 \
      pk[x] = (uint4)(0);                                                                        \
      if (u < TASKS && (T0) + r < end) pk[x] = kv4[(base_ + r) * (WIDTH / 8) + cc];              \
    }                                                                                            \
  }
  if (start < end) FETCH(start)
#endif

  // This thread's rows of Q (heads g and g + 8) for the warp's k16 steps kg, kg + KG, ...
  uint qf[QK][4];
  {
    const __global float* qa = qs + ((size_t)b * heads + h0 + g) * WIDTH;
    const __global float* qb = qa + 8 * WIDTH;
    const bool ra = h0 + g < heads, rb = h0 + g + 8 < heads;
#pragma unroll
    for (int i = 0; i < QK; ++i) {
      const int c = (kg + i * KG) * 16 + 2 * t;
      const bool in = KSTEPS % KG == 0 || kg + i * KG < KSTEPS;
      const float2 x0 = ra && in ? vload2(0, qa + c) : (float2)(0.0f);
      const float2 x1 = rb && in ? vload2(0, qb + c) : (float2)(0.0f);
      const float2 x2 = ra && in ? vload2(0, qa + c + 8) : (float2)(0.0f);
      const float2 x3 = rb && in ? vload2(0, qb + c + 8) : (float2)(0.0f);
      qf[i][0] = pack2(x0.x, x0.y);
      qf[i][1] = pack2(x1.x, x1.y);
      qf[i][2] = pack2(x2.x, x2.y);
      qf[i][3] = pack2(x3.x, x3.y);
    }
  }

#if ASYNC
  // acc[j]: n8 tile j of the warp's columns, in mma.sync's C layout.
  float acc[2 * OPAIRS][4];
#pragma unroll
  for (int j = 0; j < 2 * OPAIRS; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
#else
  float acc[OPAIRS][2][4];
#pragma unroll
  for (int j = 0; j < OPAIRS; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][0][e] = acc[j][1][e] = 0.0f;
#endif
  // The softmax's head and its running max and sum (the same in each of its TPH threads).
  const int sh = tid / TPH, su = tid % TPH;
  float m = -INFINITY, l = 0.0f;

#if ASYNC
  for (int i = 0; i < tiles; ++i) {
    const int t0 = start + i * BN;
    const uint cur = ring0 + (i % STAGES) * TBYTES;
    // Every warp is done with tile i - 1, whose buffer takes tile i + STAGES - 1 (issued before
    // waiting for tile i, so that STAGES tiles are in flight during the wait), its scores and its
    // P. Then tile i has landed: this thread's copies, and with the barrier everyone's.
    barrier(CLK_LOCAL_MEM_FENCE);
    {
      const int j = i + STAGES - 1, page = next_page;
      next_page = j + 1 < tiles ? table[(start + (j + 1) * BN) / block_size] : 0;
      if (j < tiles) load_tile(ring0 + (j % STAGES) * TBYTES, kv16, page, block_size, start + j * BN, end, tid);
      cp_commit();
    }
    CP_WAIT(STAGES - 1);
    barrier(CLK_LOCAL_MEM_FENCE);
#else
  for (int t0 = start; t0 < end; t0 += BN) {
    // Every warp is done with the last tile, its scores and its P.
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int x = 0; x < FPT; ++x) {
      const int u = tid + x * NT, r = u / (WIDTH / 8), cc = u - r * (WIDTH / 8);
      if (u < TASKS) vstore4(pk[x], 0, tile + r * RSTR + 4 * cc);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (t0 + BN < end) FETCH(t0 + BN)
#endif

    // S over this warp's k16 steps and its share of the tokens, into local memory.
    {
      float s[STILES][4];
#pragma unroll
      for (int j = 0; j < STILES; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
      for (int i = 0; i < QK; ++i) {
        const int ks = kg + i * KG;
        if (KSTEPS % KG == 0 || ks < KSTEPS) {
#if ASYNC
#pragma unroll
          for (int j = 0; j < STILES; j += 2) {
            // Matrices (tokens 0-7, 8-15 of the pair of n8 tiles) x (k 0-7, 8-15), rows as stored.
            uint bf[4];
            const int row = (tg * STILES + j) * 8 + (lane & 7) + ((lane >> 4) << 3);
            ldsm_x4(bf, cur + row * (RSTR * 4) + 32 * ks + (((lane >> 3) & 1) << 4));
            mma(s[j], qf[i][0], qf[i][1], qf[i][2], qf[i][3], bf[0], bf[1]);
            mma(s[j + 1], qf[i][0], qf[i][1], qf[i][2], qf[i][3], bf[2], bf[3]);
          }
#else
#pragma unroll
          for (int j = 0; j < STILES; ++j) {
            const __local uint* kr = tile + ((tg * STILES + j) * 8 + g) * RSTR + 8 * ks + t;
            mma(s[j], qf[i][0], qf[i][1], qf[i][2], qf[i][3], kr[0], kr[4]);
          }
#endif
        }
      }
#pragma unroll
      for (int j = 0; j < STILES; ++j) {
        __local float* row = part_s + (kg * 16 + g) * SR + (tg * STILES + j) * 8 + 2 * t;
        vstore2((float2)(s[j][0], s[j][1]), 0, row);
        vstore2((float2)(s[j][2], s[j][3]), 0, row + 8 * SR);
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    // Online softmax: head sh, tokens 2 (su + TPH i) and the next.
    {
      float2 x[PAIRS];
      float mx = -INFINITY;
#pragma unroll
      for (int i = 0; i < PAIRS; ++i) {
        const int j = 2 * (su + TPH * i);
        float2 v = (float2)(0.0f);
#pragma unroll
        for (int k = 0; k < KG; ++k) v += vload2(0, part_s + (k * 16 + sh) * SR + j);
        if (t0 + j >= end) v.x = -INFINITY;
        if (t0 + j + 1 >= end) v.y = -INFINITY;
        x[i] = v;
        mx = fmax(mx, fmax(v.x, v.y));
      }
#pragma unroll
      for (int o = 1; o < TPH; o *= 2) mx = fmax(mx, shfl_xor(mx, o));
      // Every tile holds a token of the part: mx is finite, and alpha 0 on the first tile.
      const float top = fmax(m, mx), alpha = ex2(m - top);
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < PAIRS; ++i) {
        const float p0 = ex2(x[i].x - top), p1 = ex2(x[i].y - top);
        sum += p0 + p1;
        p_s[sh * PSTR + su + TPH * i] = pack2(p0, p1);
      }
#pragma unroll
      for (int o = 1; o < TPH; o *= 2) sum += shfl_xor(sum, o);
      m = top;
      l = l * alpha + sum;
      if (su == 0) alpha_s[sh] = alpha;
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    // O = alpha O + P C[:, warp's columns].
    {
      const float a0 = alpha_s[g], a1 = alpha_s[g + 8];
#if ASYNC
#pragma unroll
      for (int j = 0; j < 2 * OPAIRS; ++j) {
        acc[j][0] *= a0;
        acc[j][1] *= a0;
        acc[j][2] *= a1;
        acc[j][3] *= a1;
      }
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        // P's heads x tokens 16 kk .. 16 kk + 15 as A: matrices (heads 0-7, 8-15) x (tokens 0-7, 8-15).
        uint a[4];
        ldsm_x4(a, p0s + (lane & 15) * (PSTR * 4) + 32 * kk + ((lane >> 4) << 4));
#pragma unroll
        for (int j = 0; j < 2 * OPAIRS; j += 2) {
          // Stored [token][column]: matrices (tokens 0-7, 8-15) x (columns 0-7, 8-15), transposed.
          uint r4[4];
          const int row = 16 * kk + (lane & 7) + (((lane >> 3) & 1) << 3);
          ldsm_x4_t(r4, cur + row * (RSTR * 4) + 2 * (warp * CW + 8 * j) + ((lane >> 4) << 4));
          mma(acc[j], a[0], a[1], a[2], a[3], r4[0], r4[1]);
          mma(acc[j + 1], a[0], a[1], a[2], a[3], r4[2], r4[3]);
        }
      }
#else
#pragma unroll
      for (int j = 0; j < OPAIRS; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          acc[j][h][0] *= a0;
          acc[j][h][1] *= a0;
          acc[j][h][2] *= a1;
          acc[j][h][3] *= a1;
        }
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        const __local uint* pr = p_s + g * PSTR + 8 * kk + t;
        const uint f0 = pr[0], f1 = pr[8 * PSTR], f2 = pr[4], f3 = pr[8 * PSTR + 4];
        // Words of tokens 16 kk + 2t, + 1, + 8, + 9 holding columns 2g, 2g + 1 of the pair's 16.
        const __local uint* cr = tile + (16 * kk + 2 * t) * RSTR + warp * (CW / 2) + g;
#pragma unroll
        for (int j = 0; j < OPAIRS; ++j) {
          const uint w0 = cr[8 * j], w1 = cr[RSTR + 8 * j], w8 = cr[8 * RSTR + 8 * j], w9 = cr[9 * RSTR + 8 * j];
          mma(acc[j][0], f0, f1, f2, f3, (w0 & 0xffffu) | (w1 << 16), (w8 & 0xffffu) | (w9 << 16));
          mma(acc[j][1], f0, f1, f2, f3, (w0 >> 16) | (w1 & 0xffff0000u), (w8 >> 16) | (w9 & 0xffff0000u));
        }
      }
#endif
    }
  }
#if !ASYNC
#undef FETCH
#endif

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int head = h0 + g + 8 * h;
    if (head < heads) {
      const size_t slot = ((size_t)b * heads + head) * splits + split;
#if ASYNC
      // acc[j] holds columns 8j + 2t and 8j + 2t + 1 of the warp's.
      __global float* o = part_o + slot * RANK + warp * CW + 2 * t;
#pragma unroll
      for (int j = 0; j < 2 * OPAIRS; ++j) vstore2((float2)(acc[j][2 * h], acc[j][2 * h + 1]), 0, o + 8 * j);
#else
      // acc[j][0] holds columns 4t and 4t + 2 of the pair's 16, acc[j][1] 4t + 1 and 4t + 3.
      __global float* o = part_o + slot * RANK + warp * CW + 4 * t;
#pragma unroll
      for (int j = 0; j < OPAIRS; ++j)
        vstore4((float4)(acc[j][0][2 * h], acc[j][1][2 * h], acc[j][0][2 * h + 1], acc[j][1][2 * h + 1]), 0, o + 16 * j);
#endif
    }
  }
  if (su == 0 && h0 + sh < heads) {
    const size_t slot = ((size_t)b * heads + h0 + sh) * splits + split;
    part_ml[slot * 2] = m;
    part_ml[slot * 2 + 1] = l;
  }
}
