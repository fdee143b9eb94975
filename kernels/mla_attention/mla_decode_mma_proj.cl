// mla_decode's projections on NVIDIA tensor cores through inline PTX (common/clc_mma.h), the
// passes around mla_decode_mma.cl's attention: the absorb (queries into the latent space) and the
// parts' merge with the value projection, the design of mla_decode.cu's in OpenCL C 1.2. Both are
// per head a small GEMM over the batch, so that each head's weights are read once for many
// sequences; on CUDA cores their f32 dot products and local-memory operands held the whole
// decode back (mla_decode.cl's absorb and combine took 14 and 24 us of 98 at B32 H16 on an H200).
//
// One program per kernel, chosen by which of these is defined:
//   NOPE: mla_absorb_mma (with RANK, ROPE, BF16);
//   VDIM: mla_merge_project_mma (with RANK, MR, KC, STG, BF16).
// Buffers of the storage type are 16-bit words; rows are 16-byte aligned (the widths below are
// multiples of 8), as cp.async needs.
#include "common/clc.h"
#include "common/clc_mma.h"

#define WIDTH (RANK + ROPE)
#define LOG2E 1.4426950408889634f

#ifdef NOPE
#define AR (NOPE + 8)  // local row stride of the queries in 16-bit words (16 bytes of padding: ldmatrix's
                       // eight rows fall in distinct banks)
#define WR 72          // the same for the block's 64 columns of w_kc

#if NOPE % 16 || RANK % 64
#error "mla_absorb_mma: NOPE a multiple of 16, RANK of 64"
#endif

// qs = scale log2(e) [q_nope w_kc, q_pe] for 32 sequences of one head and 64 latent columns a
// workgroup of four warps (16 rows and 32 columns a warp), the block's rows of q_nope and columns
// of w_kc copied whole by cp.async. Groups past RANK / 64 along x copy the scaled q_pe instead.
// Grid (RANK / 64 + ceil(ROPE / 64), heads, ceil(batch / 32)) x 128.
__kernel __attribute__((reqd_work_group_size(128, 1, 1))) void mla_absorb_mma(
    const __global ushort* q_nope, const __global ushort* q_pe, const __global ushort* w_kc, __global float* qs,
    int batch, int heads, float scale) {
  __local ushort a_s[32 * AR] EJK_ALIGN16;
  __local ushort w_s[NOPE * WR] EJK_ALIGN16;
  const int tid = get_local_id(0), h = get_group_id(1), b0 = get_group_id(2) * 32, n0 = get_group_id(0) * 64;
  const float s = scale * LOG2E;
  if (n0 >= RANK) {
    // Every load before any store: the stores might alias the loads, so a loop of both would
    // wait out one load's latency an element.
    const int n = n0 - RANK + tid % 64;
    float v[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int b = b0 + tid / 64 + 2 * i;
      v[i] = n < ROPE && b < batch ? ejk_load(q_pe, ((size_t)b * heads + h) * ROPE + n, BF16 ? 2 : 1) : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int b = b0 + tid / 64 + 2 * i;
      if (n < ROPE && b < batch) qs[((size_t)b * heads + h) * WIDTH + RANK + n] = s * v[i];
    }
  } else {
    const uint as = EJK_SMEM(a_s), ws = EJK_SMEM(w_s);
    for (int c = tid; c < 32 * (NOPE / 8); c += 128) {
      const int r = c / (NOPE / 8), k = c % (NOPE / 8) * 8, b = b0 + r;
      const bool in = b < batch;
      cp16(as + 2 * (r * AR + k), in ? q_nope + ((size_t)b * heads + h) * NOPE + k : q_nope, in ? 16 : 0);
    }
    for (int c = tid; c < NOPE * 8; c += 128) {
      const int k = c / 8, n = c % 8 * 8;
      cp16(ws + 2 * (k * WR + n), w_kc + ((size_t)h * NOPE + k) * RANK + n0 + n, 16);
    }
    cp_commit();
    CP_WAIT(0);
    barrier(CLK_LOCAL_MEM_FENCE);
    const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int r0 = (warp >> 1) * 16, c0 = (warp & 1) * 32;
    float acc[4][4];
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll 4
    for (int k = 0; k < NOPE; k += 16) {
      // Matrices (rows 0-7, 8-15) x (k 0-7, 8-15) of the warp's 16 rows.
      uint fa[4];
      ldsm_x4(fa, as + 2 * ((r0 + (lane & 15)) * AR + k + ((lane >> 4) << 3)));
#pragma unroll
      for (int j = 0; j < 4; j += 2) {
        // Stored [k][n]: matrices (k 0-7, 8-15) x (n 0-7, 8-15), transposed.
        uint fb[4];
        ldsm_x4_t(fb, ws + 2 * ((k + (lane & 7) + (((lane >> 3) & 1) << 3)) * WR + c0 + j * 8 + ((lane >> 4) << 3)));
        mma(acc[j], fa[0], fa[1], fa[2], fa[3], fb[0], fb[1]);
        mma(acc[j + 1], fa[0], fa[1], fa[2], fa[3], fb[2], fb[3]);
      }
    }
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      const int b = b0 + r0 + g + 8 * hi;
      if (b < batch) {
        __global float* o = qs + ((size_t)b * heads + h) * WIDTH + n0 + c0 + 2 * t;
#pragma unroll
        for (int j = 0; j < 4; ++j) vstore2((float2)(acc[j][2 * hi] * s, acc[j][2 * hi + 1] * s), 0, o + 8 * j);
      }
    }
  }
}
#endif

#ifdef VDIM
#define VR (VDIM + 8)                       // local row stride of a stage of w_vc in 16-bit words
#define OR (RANK + 8)                       // the same for the merged o_lat
#define PW EJK_CEIL_DIV(VDIM / 16, 8)       // 16-column pairs of n8 tiles a warp
#define CHUNKS (RANK / KC)                  // stages' worth of w_vc rows
#define ITEMS EJK_CEIL_DIV(MR * (RANK / 4), 256)  // float4s of o_lat a thread merges
#define MAXS 32                             // parts (the space's largest `splits`)

#if VDIM % 16 || RANK % KC || KC % 16 || MR < 1 || MR > 8 || STG < 2
#error "mla_merge_project_mma: VDIM a multiple of 16, KC of 16 dividing RANK, MR from 1 to 8, STG at least 2"
#endif

// out = o w_vc[h] with o the parts' o_lat merged by log-sum-exp and normalised, straight into the
// projection's left operand in local memory (in the storage type, as the reference rounds it), for
// MR sequences of one head and every column of out. w_vc[h] streams through a ring of STG
// stages of KC rows (all of it at once where local memory holds it), the first stages issued
// before the merge so that they land while it runs;
// the eight warps split out's columns in pairs of n8 tiles, each over the whole latent rank, so
// no partial sums cross warps. Rows MR-15 of mma.sync's A are zeros (rows 8-15 never loaded).
// Parts that saw no token have l = 0 and weight 0; their o_lat is zeros. Grid (heads,
// ceil(batch / MR)) x 256.
__kernel __attribute__((reqd_work_group_size(256, 1, 1))) void mla_merge_project_mma(
    const __global float* part_o, const __global float* part_ml, const __global ushort* w_vc, __global ushort* out,
    int batch, int heads, int splits) {
  __local ushort w_s[STG * KC * VR] EJK_ALIGN16;
  __local ushort o_s[8 * OR] EJK_ALIGN16;
  __local float wt[MR * MAXS];
  const int tid = get_local_id(0), warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int h = get_group_id(0), b0 = get_group_id(1) * MR;
  const uint ws = EJK_SMEM(w_s), os = EJK_SMEM(o_s);
  const __global ushort* wh = w_vc + (size_t)h * RANK * VDIM;
#define LOAD_W(C)                                                                          \
  for (int u = tid; u < KC * (VDIM / 8); u += 256) {                                       \
    const int k = u / (VDIM / 8), n = u % (VDIM / 8) * 8;                                  \
    cp16(ws + 2 * (((C) % STG * KC + k) * VR + n), wh + ((size_t)(C) * KC + k) * VDIM + n, 16); \
  }
#pragma unroll
  for (int c = 0; c < STG; ++c) {
    if (c < CHUNKS) LOAD_W(c)
    cp_commit();
  }
  for (int e = tid; e < (8 - MR) * OR / 2; e += 256) ((__local uint*)(o_s + MR * OR))[e] = 0u;

  // Each sequence's parts' weights exp2(m - max) / sum, a warp a sequence.
  if (warp < MR) {
    const int b = b0 + warp;
    const __global float* ml = part_ml + ((size_t)b * heads + h) * splits * 2;
    float mx = -INFINITY, total = 0.0f;
    if (b < batch) {
      for (int s = lane; s < splits; s += 32)
        if (ml[2 * s + 1] > 0.0f) mx = fmax(mx, ml[2 * s]);
      for (int o = 16; o > 0; o /= 2) mx = fmax(mx, shfl_xor(mx, o));
      for (int s = lane; s < splits; s += 32)
        if (ml[2 * s + 1] > 0.0f) total += ex2(ml[2 * s] - mx) * ml[2 * s + 1];
      for (int o = 16; o > 0; o /= 2) total += shfl_xor(total, o);
    }
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;
    for (int s = lane; s < splits; s += 32)
      wt[warp * MAXS + s] = b < batch && ml[2 * s + 1] > 0.0f ? ex2(ml[2 * s] - mx) * inv : 0.0f;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  // The merge, every part's loads of a thread in flight together (the pass is bound by their
  // latency). Rows past the batch read the last sequence's parts with weight 0.
  {
    float4 x[ITEMS];
    const __global float* po[ITEMS];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const int c = min(tid + 256 * i, MR * (RANK / 4) - 1), r = c / (RANK / 4), b = min(b0 + r, batch - 1);
      x[i] = (float4)(0.0f);
      po[i] = part_o + ((size_t)b * heads + h) * splits * RANK + c % (RANK / 4) * 4;
    }
#pragma unroll 8
    for (int s = 0; s < splits; ++s)
#pragma unroll
      for (int i = 0; i < ITEMS; ++i) {
        const float w = wt[min(tid + 256 * i, MR * (RANK / 4) - 1) / (RANK / 4) * MAXS + s];
        x[i] = mad((float4)(w), vload4(0, po[i] + (size_t)s * RANK), x[i]);
      }
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const int c = tid + 256 * i, r = c / (RANK / 4), col = c % (RANK / 4) * 4;
      if (c < MR * (RANK / 4))
        *(__local uint2*)(o_s + r * OR + col) = (uint2)(pack2(x[i].x, x[i].y), pack2(x[i].z, x[i].w));
    }
  }

  float acc[PW][2][4];
#pragma unroll
  for (int p = 0; p < PW; ++p)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[p][0][e] = acc[p][1][e] = 0.0f;
  for (int c = 0; c < CHUNKS; ++c) {
    // Stage c has landed (STG groups were committed ahead of it), and with the barrier the merge's o.
    CP_WAIT(STG - 1);
    barrier(CLK_LOCAL_MEM_FENCE);
    const uint cur = ws + 2 * (c % STG) * KC * VR;
#pragma unroll
    for (int kk = 0; kk < KC; kk += 16) {
      // Rows 0-7 of o: matrices (k 0-7, 8-15), A's a0 and a2 (a1 and a3, rows 8-15, are zero).
      uint fa[2];
      ldsm_x2(fa, os + 2 * ((lane & 7) * OR + c * KC + kk + (((lane >> 3) & 1) << 3)));
#pragma unroll
      for (int p = 0; p < PW; ++p) {
        const int pair = warp + 8 * p;
        if ((VDIM / 16) % 8 == 0 || pair < VDIM / 16) {
          // Stored [k][n]: matrices (k 0-7, 8-15) x (n 0-7, 8-15), transposed.
          uint fb[4];
          ldsm_x4_t(fb, cur + 2 * ((kk + (lane & 7) + (((lane >> 3) & 1) << 3)) * VR + pair * 16 + ((lane >> 4) << 3)));
          mma(acc[p][0], fa[0], 0u, fa[1], 0u, fb[0], fb[1]);
          mma(acc[p][1], fa[0], 0u, fa[1], 0u, fb[2], fb[3]);
        }
      }
    }
    // Every warp is done with stage c, which takes chunk c + STG.
    barrier(CLK_LOCAL_MEM_FENCE);
    if (c + STG < CHUNKS) LOAD_W(c + STG)
    cp_commit();
  }
#undef LOAD_W
  const int b = b0 + g;
  if (g < MR && b < batch) {
    __global ushort* o = out + ((size_t)b * heads + h) * VDIM + 2 * t;
#pragma unroll
    for (int p = 0; p < PW; ++p) {
      const int pair = warp + 8 * p;
      if ((VDIM / 16) % 8 == 0 || pair < VDIM / 16)
#pragma unroll
        for (int j = 0; j < 2; ++j)
          *(__global uint*)(o + pair * 16 + 8 * j) = pack2(acc[p][j][0], acc[p][j][1]);
    }
  }
}
#endif
