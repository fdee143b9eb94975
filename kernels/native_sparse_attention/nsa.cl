// native_sparse_attention on OpenCL C 1.2: the kernels of one program (see opencl.cpp for the
// plan). Compile-time (-D): THREADS (work-items per group), TILE (keys per staged tile), HPG
// (query heads per group), DK, DV (head dims). Everything else is a kernel argument, the
// storage dtype included (0 f32, 1 f16, 2 bf16), so one program serves every dtype, batch and
// block size. Storage is read and written through common/clc.h; all arithmetic is f32.

// Staged key and value rows are padded by one word, so that work-items reading the same column
// of different rows hit different local-memory banks.
#define KS (DK + 1)
#define VS (DV + 1)

#include "common/clc.h"
#include "nsa_seq.h"

// The selection's inverse, for the backward's keys: per (block, kv head) a bitmap of the
// queries that list the block, bit t - (the block's first token) of W words. A block starting
// at token j of sequence s is slot j / BS + s: distinct for every block of every sequence, at
// most tokens / BS + nseq of them. Set by atomic_or, so the bitmap, and what is summed from it
// in token order, does not depend on scheduling.
__kernel void nsa_bwd_clear(__global uint* sel, long words) {
  for (long i = get_global_id(0); i < words; i += get_global_size(0)) sel[i] = 0u;
}

// One work-item per (token, kv head): a bit for every block its selection lists (only entries
// with 0 <= e BS <= the token's position, as every pass reads them).
__kernel void nsa_bwd_mark(const __global int* bi, const __global int* bc, const __global int* cu,
                           __global volatile uint* sel, int tokens, int nseq, int H, int S, int BS, int W) {
  const int i = get_global_id(0);
  if (i >= tokens * H) return;
  const int t = i / H, h = i % H;
  int bos, eos;
  const int seq = locate(cu, nseq, t, &bos, &eos);
  const int cnt = bc[i];
  for (int k = 0; k < cnt; ++k) {
    const int e = bi[i * S + k];
    if (e < 0 || e * BS > t - bos) continue;
    const int j = bos + e * BS, rel = t - j;
    atomic_or(sel + ((size_t)(j / BS + seq) * H + h) * W + rel / 32, 1u << (rel % 32));
  }
}

float ldot(const __local float* a, const __local float* b, int n) {
  float s = 0.f;
  for (int i = 0; i < n; ++i) s = mad(a[i], b[i], s);
  return s;
}

// The mean of every whole block's keys and values, at the row of its first token (f32); one
// work-item per (token, kv head, column).
__kernel void nsa_pool(const __global ushort* k16, const __global ushort* v16, const __global int* cu,
                       __global float* kc, __global float* vc, int tokens, int nseq, int H, int BS, int dtype) {
  const int W = DK + DV;
  const int i = get_global_id(0);
  if (i >= tokens * H * W) return;
  const int t = i / (H * W), h = i / W % H, d = i % W;
  int bos, eos;
  locate(cu, nseq, t, &bos, &eos);
  if ((t - bos) % BS != 0 || t + BS > eos) return;
  float s = 0.f;
  if (d < DK) {
    for (int j = t; j < t + BS; ++j) s += ejk_load(k16, (j * H + h) * DK + d, dtype);
    kc[(t * H + h) * DK + d] = s / (float)BS;
  } else {
    for (int j = t; j < t + BS; ++j) s += ejk_load(v16, (j * H + h) * DV + d - DK, dtype);
    vc[(t * H + h) * DV + d - DK] = s / (float)BS;
  }
}

// One staged tile of n keys: scores of the group's heads, online softmax, accumulation.
void fwd_tile(int n, const __local float* qs, const __local float* kt, const __local float* vt, __local float* sc,
              __local float* acc, __local float* m, __local float* l, __local float* al) {
  const int lid = get_local_id(0);
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int pr = lid; pr < HPG * TILE; pr += THREADS) {
    const int g = pr / TILE, r = pr % TILE;
    if (r < n) sc[pr] = ldot(qs + g * DK, kt + r * KS, DK);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int g = lid; g < HPG; g += THREADS) {
    float mx = m[g];
    for (int r = 0; r < n; ++r) mx = fmax(mx, sc[g * TILE + r]);
    const float a = exp(m[g] - mx);
    float sum = 0.f;
    for (int r = 0; r < n; ++r) {
      const float p = exp(sc[g * TILE + r] - mx);
      sc[g * TILE + r] = p;
      sum += p;
    }
    l[g] = l[g] * a + sum;
    m[g] = mx;
    al[g] = a;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int e = lid; e < HPG * DV; e += THREADS) {
    const int g = e / DV, d = e % DV;
    float x = acc[e] * al[g];
    for (int r = 0; r < n; ++r) x = mad(sc[g * TILE + r], vt[r * VS + d], x);
    acc[e] = x;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}

// Stages rows of the compression branch (pooled rows bos + c * BS, c0 <= c < c0 + n) or of the
// selection branch (token rows j0 .. j0 + n - 1) into kt / vt.
void stage_pooled(int n, int row0, int step, int H, int h, const __global float* kc, const __global float* vc,
                  __local float* kt, __local float* vt) {
  const int lid = get_local_id(0);
  for (int e = lid; e < n * DK; e += THREADS) kt[e / DK * KS + e % DK] = kc[((row0 + e / DK * step) * H + h) * DK + e % DK];
  for (int e = lid; e < n * DV; e += THREADS) vt[e / DV * VS + e % DV] = vc[((row0 + e / DV * step) * H + h) * DV + e % DV];
}

void stage_rows(int n, int row0, int H, int h, const __global ushort* k16, const __global ushort* v16, int dtype,
                __local float* kt, __local float* vt) {
  const int lid = get_local_id(0);
  for (int e = lid; e < n * DK; e += THREADS) kt[e / DK * KS + e % DK] = ejk_load(k16, ((row0 + e / DK) * H + h) * DK + e % DK, dtype);
  for (int e = lid; e < n * DV; e += THREADS) vt[e / DV * VS + e % DV] = ejk_load(v16, ((row0 + e / DV) * H + h) * DV + e % DV, dtype);
}

// One group per (token, kv head * parts + part): HPG query heads of the kv head's group, both
// branches, o = g_cmp o_cmp + g_slc o_slc.
__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void nsa_fwd(
    const __global ushort* q16, const __global ushort* k16, const __global ushort* v16, const __global ushort* gc16,
    const __global ushort* gs16, const __global int* bi, const __global int* bc, const __global int* cu,
    const __global float* kc, const __global float* vc, __global ushort* o16, __global ushort* oc16,
    __global ushort* os16, __global float* lse, int nseq, int H, int G, int S, int BS, float scale, int dtype) {
  __local float qs[HPG * DK], acc[HPG * DV], first[HPG * DV], kt[TILE * KS], vt[TILE * VS], sc[HPG * TILE];
  __local float m[HPG], l[HPG], al[HPG];
  const int t = get_group_id(0), parts = G / HPG, h = get_group_id(1) / parts, part = get_group_id(1) % parts;
  const int lid = get_local_id(0), HQ = H * G, th0 = t * HQ + h * G + part * HPG;
  int bos, eos;
  locate(cu, nseq, t, &bos, &eos);
  const int pos = t - bos;
  for (int e = lid; e < HPG * DK; e += THREADS) qs[e] = scale * ejk_load(q16, th0 * DK + e, dtype);
  for (int branch = 0; branch < 2; ++branch) {
    for (int e = lid; e < HPG * DV; e += THREADS) acc[e] = 0.f;
    for (int g = lid; g < HPG; g += THREADS) {
      m[g] = -INFINITY;
      l[g] = 0.f;
    }
    if (branch == 0) {
      const int nc = (pos + 1) / BS;
      for (int c0 = 0; c0 < nc; c0 += TILE) {
        const int n = min(TILE, nc - c0);
        stage_pooled(n, bos + c0 * BS, BS, H, h, kc, vc, kt, vt);
        fwd_tile(n, qs, kt, vt, sc, acc, m, l, al);
      }
    } else {
      const int cnt = bc[t * H + h];
      for (int i = 0; i < cnt; ++i) {
        const int e = bi[(t * H + h) * S + i];
        // A block past the query runs no tile rather than `continue` past the barriers.
        const int len = e < 0 || e * BS > pos ? 0 : min(BS, pos - e * BS + 1);
        for (int j0 = 0; j0 < len; j0 += TILE) {
          const int n = min(TILE, len - j0);
          stage_rows(n, bos + e * BS + j0, H, h, k16, v16, dtype, kt, vt);
          fwd_tile(n, qs, kt, vt, sc, acc, m, l, al);
        }
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = lid; e < HPG * DV; e += THREADS) {
      const int g = e / DV;
      const float x = l[g] > 0.f ? acc[e] / l[g] : 0.f;
      if (branch == 0) {
        ejk_store(oc16, th0 * DV + e, dtype, x);
        first[e] = x;
      } else {
        ejk_store(os16, th0 * DV + e, dtype, x);
        ejk_store(o16, th0 * DV + e, dtype, ejk_load(gc16, th0 + g, dtype) * first[e] + ejk_load(gs16, th0 + g, dtype) * x);
      }
    }
    for (int g = lid; g < HPG; g += THREADS) lse[(th0 + g) * 2 + branch] = l[g] > 0.f ? m[g] + log(l[g]) : -INFINITY;
    barrier(CLK_LOCAL_MEM_FENCE);
  }
}

// dS of one staged tile for the group's heads, then dq += dS k.
void dq_tile(int n, const __local float* qs, const __local float* dob, const __local float* kt, const __local float* vt,
             __local float* sc, __local float* dq, const __local float* lb, const __local float* db) {
  const int lid = get_local_id(0);
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int pr = lid; pr < HPG * TILE; pr += THREADS) {
    const int g = pr / TILE, r = pr % TILE;
    if (r < n) {
      const float p = exp(ldot(qs + g * DK, kt + r * KS, DK) - lb[g]);
      sc[pr] = p * (ldot(dob + g * DV, vt + r * VS, DV) - db[g]);
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int e = lid; e < HPG * DK; e += THREADS) {
    const int g = e / DK, d = e % DK;
    float x = dq[e];
    for (int r = 0; r < n; ++r) x = mad(sc[g * TILE + r], kt[r * KS + d], x);
    dq[e] = x;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}

// Backward, per (token, kv head * parts + part): dg of both branches, their row terms delta
// (f32 scratch for the key passes), dq.
__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void nsa_bwd_dq(
    const __global ushort* q16, const __global ushort* k16, const __global ushort* v16, const __global ushort* gc16,
    const __global ushort* gs16, const __global int* bi, const __global int* bc, const __global int* cu,
    const __global float* kc, const __global float* vc, const __global ushort* oc16, const __global ushort* os16,
    const __global float* lse, const __global ushort* do16, __global ushort* dq16, __global ushort* dgc16,
    __global ushort* dgs16, __global float* delta, int nseq, int H, int G, int S, int BS, float scale, int dtype) {
  __local float qs[HPG * DK], dq[HPG * DK], dob[HPG * DV], kt[TILE * KS], vt[TILE * VS], sc[HPG * TILE];
  __local float lb[HPG], db[HPG];
  const int t = get_group_id(0), parts = G / HPG, h = get_group_id(1) / parts, part = get_group_id(1) % parts;
  const int lid = get_local_id(0), HQ = H * G, th0 = t * HQ + h * G + part * HPG;
  int bos, eos;
  locate(cu, nseq, t, &bos, &eos);
  const int pos = t - bos;
  for (int e = lid; e < HPG * DK; e += THREADS) {
    qs[e] = scale * ejk_load(q16, th0 * DK + e, dtype);
    dq[e] = 0.f;
  }
  for (int branch = 0; branch < 2; ++branch) {
    const __global ushort* ob16 = branch == 0 ? oc16 : os16;
    const __global ushort* gb16 = branch == 0 ? gc16 : gs16;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = lid; e < HPG * DV; e += THREADS) dob[e] = ejk_load(do16, th0 * DV + e, dtype);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int g = lid; g < HPG; g += THREADS) {
      float D = 0.f;
      for (int d = 0; d < DV; ++d) D = mad(dob[g * DV + d], ejk_load(ob16, (th0 + g) * DV + d, dtype), D);
      ejk_store(branch == 0 ? dgc16 : dgs16, th0 + g, dtype, D);
      db[g] = ejk_load(gb16, th0 + g, dtype) * D;
      delta[(th0 + g) * 2 + branch] = db[g];
      lb[g] = lse[(th0 + g) * 2 + branch];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = lid; e < HPG * DV; e += THREADS) dob[e] *= ejk_load(gb16, th0 + e / DV, dtype);
    if (branch == 0) {
      const int nc = (pos + 1) / BS;
      for (int c0 = 0; c0 < nc; c0 += TILE) {
        const int n = min(TILE, nc - c0);
        stage_pooled(n, bos + c0 * BS, BS, H, h, kc, vc, kt, vt);
        dq_tile(n, qs, dob, kt, vt, sc, dq, lb, db);
      }
    } else {
      const int cnt = bc[t * H + h];
      for (int i = 0; i < cnt; ++i) {
        const int e = bi[(t * H + h) * S + i];
        // A block past the query runs no tile rather than `continue` past the barriers.
        const int len = e < 0 || e * BS > pos ? 0 : min(BS, pos - e * BS + 1);
        for (int j0 = 0; j0 < len; j0 += TILE) {
          const int n = min(TILE, len - j0);
          stage_rows(n, bos + e * BS + j0, H, h, k16, v16, dtype, kt, vt);
          dq_tile(n, qs, dob, kt, vt, sc, dq, lb, db);
        }
      }
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int e = lid; e < HPG * DK; e += THREADS) ejk_store(dq16, th0 * DK + e, dtype, scale * dq[e]);
}

// Backward, per (token, kv head) where the token lies in a whole block: its share of the pooled
// key's and value's gradient (f32 scratch, the token's row), from the queries that see the block
// at the token's offset o in it (every BS-th, from the block's last token + o on). The block's BS
// shares are summed in offset order by nsa_bwd_dkv: the work of the early blocks, which every
// later query sees, spreads over BS groups instead of one. Other groups run no query and store
// nothing; see the note on barriers above nsa_bwd_dkv.
__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void nsa_bwd_dcmp(
    const __global ushort* q16, const __global ushort* gc16, const __global int* cu, const __global float* kc,
    const __global float* vc, const __global float* lse, const __global ushort* do16, const __global float* delta,
    __global float* dkc, __global float* dvc, int nseq, int H, int G, int BS, float scale, int dtype) {
  __local float kr[DK], vr[DV], gk[DK], gv[DV], qs[HPG * DK], dob[HPG * DV], pp[HPG], ds[HPG];
  const int t0 = get_group_id(0), h = get_group_id(1), lid = get_local_id(0), HQ = H * G;
  int bos, eos;
  locate(cu, nseq, t0, &bos, &eos);
  const int o = (t0 - bos) % BS, block0 = t0 - o;
  const bool whole = block0 + BS <= eos;
  if (whole) {
    for (int d = lid; d < DK; d += THREADS) {
      kr[d] = kc[(block0 * H + h) * DK + d];
      gk[d] = 0.f;
    }
    for (int d = lid; d < DV; d += THREADS) {
      vr[d] = vc[(block0 * H + h) * DV + d];
      gv[d] = 0.f;
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const int t_end = whole ? eos : 0;
  for (int t = block0 + BS - 1 + o; t < t_end; t += BS)
    for (int g0 = 0; g0 < G; g0 += HPG) {
      const int th0 = t * HQ + h * G + g0;
      barrier(CLK_LOCAL_MEM_FENCE);
      for (int e = lid; e < HPG * DK; e += THREADS) qs[e] = scale * ejk_load(q16, th0 * DK + e, dtype);
      for (int e = lid; e < HPG * DV; e += THREADS) dob[e] = ejk_load(do16, th0 * DV + e, dtype) * ejk_load(gc16, th0 + e / DV, dtype);
      barrier(CLK_LOCAL_MEM_FENCE);
      for (int g = lid; g < HPG; g += THREADS) {
        const float p = exp(ldot(qs + g * DK, kr, DK) - lse[(th0 + g) * 2]);
        pp[g] = p;
        ds[g] = p * (ldot(dob + g * DV, vr, DV) - delta[(th0 + g) * 2]);
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      for (int d = lid; d < DK; d += THREADS) {
        float x = gk[d];
        for (int g = 0; g < HPG; ++g) x = mad(ds[g], qs[g * DK + d], x);
        gk[d] = x;
      }
      for (int d = lid; d < DV; d += THREADS) {
        float x = gv[d];
        for (int g = 0; g < HPG; ++g) x = mad(pp[g], dob[g * DV + d], x);
        gv[d] = x;
      }
    }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (whole) {
    for (int d = lid; d < DK; d += THREADS) dkc[(t0 * H + h) * DK + d] = gk[d];
    for (int d = lid; d < DV; d += THREADS) dvc[(t0 * H + h) * DV + d] = gv[d];
  }
}

// Barriers in the backward key kernels: every group runs to the end, and a barrier separates
// the work-item-dependent loops from every branch on loaded data (a group with nothing to do,
// the query loop's bounds) that decides whether barriers run. PoCL's CPU work-group compiler
// cannot prove a branch on loaded data uniform: it evaluates such a branch for work-item 0 alone
// and assumes the other work-items follow. Where an early return let work-item-dependent stores
// share a region with such a branch, a build for AVX-512 applied that assumption to the stores'
// bound (d < DK) as well, and work-items past it stored beyond the group's rows of dkc and dvc.

// Backward, per (token, kv head) where the token starts a tile of TILE keys within its block:
// the keys' gradients from every query of the sequence whose selection lists the block (as
// often as it lists it), plus 1/BS of the block's pooled gradient when the block is whole (the
// sum of its tokens' shares from nsa_bwd_dcmp, in token order).
// Other groups have no keys (n = 0) and run no query.
__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void nsa_bwd_dkv(
    const __global ushort* q16, const __global ushort* k16, const __global ushort* v16, const __global ushort* gs16,
    const __global int* bi, const __global int* bc, const __global int* cu, const __global float* lse,
    const __global ushort* do16, const __global float* delta, const __global float* dkc, const __global float* dvc,
    const __global uint* sel, __global ushort* dk16, __global ushort* dv16, int nseq, int H, int G, int S, int BS,
    int W, float scale, int dtype) {
  __local float kt[TILE * KS], vt[TILE * VS], gk[TILE * DK], gv[TILE * DV], qs[HPG * DK], dob[HPG * DV];
  __local float pp[HPG * TILE], ds[HPG * TILE];
  const int j0 = get_group_id(0), h = get_group_id(1), lid = get_local_id(0), HQ = H * G;
  int bos, eos;
  const int seq = locate(cu, nseq, j0, &bos, &eos);
  const int off = (j0 - bos) % BS;
  const int b = (j0 - bos) / BS, block0 = j0 - off;
  const int n = off % TILE == 0 ? min(TILE, min(block0 + BS, eos) - j0) : 0;
  stage_rows(n, j0, H, h, k16, v16, dtype, kt, vt);
  for (int e = lid; e < n * DK; e += THREADS) gk[e] = 0.f;
  for (int e = lid; e < n * DV; e += THREADS) gv[e] = 0.f;
  barrier(CLK_LOCAL_MEM_FENCE);
  // The queries from j0 on that list the block, in token order, from its bitmap (nsa_bwd_mark):
  // words of 32 queries, from the one holding j0.
  const __global uint* bits = sel + ((size_t)(block0 / BS + seq) * H + h) * W;
  const int w_end = n > 0 ? (eos - block0 + 31) / 32 : 0;
  for (int w = (j0 - block0) / 32; w < w_end; ++w) {
    for (uint word = bits[w] & (w == (j0 - block0) / 32 ? ~0u << ((j0 - block0) % 32) : ~0u); word != 0u;
         word &= word - 1u) {
      const int t = block0 + 32 * w + (int)popcount((word & (0u - word)) - 1u);
      const int cnt = bc[t * H + h];
      int times = 0;
      for (int i = 0; i < cnt; ++i) times += bi[(t * H + h) * S + i] == b;
      const int rows = min(n, t - j0 + 1), groups = times == 0 ? 0 : G;
      for (int g0 = 0; g0 < groups; g0 += HPG) {
        const int th0 = t * HQ + h * G + g0;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int e = lid; e < HPG * DK; e += THREADS) qs[e] = scale * ejk_load(q16, th0 * DK + e, dtype);
        for (int e = lid; e < HPG * DV; e += THREADS) dob[e] = ejk_load(do16, th0 * DV + e, dtype) * ejk_load(gs16, th0 + e / DV, dtype);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int pr = lid; pr < HPG * TILE; pr += THREADS) {
          const int g = pr / TILE, r = pr % TILE;
          float p = 0.f, s = 0.f;
          if (r < rows) {
            p = (float)times * exp(ldot(qs + g * DK, kt + r * KS, DK) - lse[(th0 + g) * 2 + 1]);
            s = p * (ldot(dob + g * DV, vt + r * VS, DV) - delta[(th0 + g) * 2 + 1]);
          }
          pp[pr] = p;
          ds[pr] = s;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int e = lid; e < n * DK; e += THREADS) {
          const int r = e / DK, d = e % DK;
          float x = gk[e];
          for (int g = 0; g < HPG; ++g) x = mad(ds[g * TILE + r], qs[g * DK + d], x);
          gk[e] = x;
        }
        for (int e = lid; e < n * DV; e += THREADS) {
          const int r = e / DV, d = e % DV;
          float x = gv[e];
          for (int g = 0; g < HPG; ++g) x = mad(pp[g * TILE + r], dob[g * DV + d], x);
          gv[e] = x;
        }
      }
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  // The pooled gradient's share, staged in qs and dob (free after the query loop).
  const bool pooled = n > 0 && block0 + BS <= eos;
  const float inv = 1.f / (float)BS;
  for (int d = lid; d < DK; d += THREADS) {
    float x = 0.f;
    for (int r = 0; pooled && r < BS; ++r) x += dkc[((block0 + r) * H + h) * DK + d];
    qs[d] = inv * x;
  }
  for (int d = lid; d < DV; d += THREADS) {
    float x = 0.f;
    for (int r = 0; pooled && r < BS; ++r) x += dvc[((block0 + r) * H + h) * DV + d];
    dob[d] = inv * x;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int e = lid; e < n * DK; e += THREADS)
    ejk_store(dk16, (j0 + e / DK) * H * DK + h * DK + e % DK, dtype, gk[e] + qs[e % DK]);
  for (int e = lid; e < n * DV; e += THREADS)
    ejk_store(dv16, (j0 + e / DV) * H * DV + h * DV + e % DV, dtype, gv[e] + dob[e % DV]);
}
