// What every flash attention program on OpenCL shares: the Params struct that carries the
// options, the problem geometry (sequence bounds, masks), the logit transform, dropout, and the
// argument lists of the forward and of every backward pass.
// Included by flash_attention.cl (the scalar passes) and flash_attention_mma.cl (the
// tensor-core passes on NVIDIA). Semantics: flash_attention.hpp.
#include "common/clc.h"
#include "common/philox.h"

#define NEG (-3.0e38f)  // a masked logit; exp2(NEG - m) is 0 for every finite m
#define LOG2E 1.44269504088896340736f
#define LN2 0.69314718055994530942f

#define F_CAUSAL 1u
#define F_VARLEN 2u
#define F_BIAS 4u
#define F_SINKS 8u
#define F_SEGMENTS 16u
#define F_DROPOUT 32u
#define F_SOFTCAP 64u
#define F_DBIAS_SCRATCH 128u
#define F_FINISH_DBIAS 256u
#define F_LIST_BATCH 512u  // SPARSE: the block lists have rows per sequence (else one set for all)
#define F_LIST_HEADS 1024u  // SPARSE: ... and per head

// Mirrors the host's ProgramOptions (program.hpp): every member 4 bytes, so both sides lay it
// out alike.
typedef struct {
  uint batch, seq_q, seq_k, total_q;
  uint heads, kv_heads, group, flags;
  int window_left, window_right;
  float qscale;      // q is multiplied by this when staged
  float bias_scale;  // the bias by this before the cap
  float cap2;        // logits_soft_cap * log2 e (with F_SOFTCAP): z = cap2 * tanh(t)
  float softmax_scale, grad_scale, keep_scale;
  uint threshold, seed_lo, seed_hi;
  uint bias_batch, bias_heads;
  uint dtypes;    // bias dtype | sinks dtype << 4 (0 f32, 1 f16, 2 bf16)
  uint extra;     // prep and finish: query blocks of the prep pass per (sequence, head)
  uint head_dim;  // D <= DMAX
  uint dtype;     // q, k, v, out, dout, dq, dk, dv: 0 f32, 1 f16, 2 bf16
  int diagonal_offset;  // added to the diagonal k_len - q_len
} Params;

// Where a workgroup is: its work-item, sequence, and that sequence's token ranges.
typedef struct {
  uint tx, ty, tid, seq;
  int q_start, q_len, k_start, k_len;
} Ctx;

#define HAS(f) ((pc->flags & (f)) != 0u)
#define BIAS_DT (pc->dtypes & 15u)
#define SINKS_DT ((pc->dtypes >> 4) & 15u)

// ---- problem geometry ----------------------------------------------------------------------

Ctx make_ctx(const Params* pc, uint seq, __global const int* cu_q, __global const int* cu_k) {
  Ctx c;
  c.tx = get_local_id(0);
  c.ty = get_local_id(1);
  c.tid = c.ty * get_local_size(0) + c.tx;
  c.seq = seq;
  if (HAS(F_VARLEN)) {
    c.q_start = cu_q[seq];
    c.q_len = cu_q[seq + 1u] - c.q_start;
    c.k_start = cu_k[seq];
    c.k_len = cu_k[seq + 1u] - c.k_start;
  } else {
    c.q_start = (int)(seq * pc->seq_q);
    c.q_len = (int)pc->seq_q;
    c.k_start = (int)(seq * pc->seq_k);
    c.k_len = (int)pc->seq_k;
  }
  return c;
}

// Keys query i may see before segment ids: [key_lo(i), key_hi(i)] (flash_attention.hpp).
int key_lo(const Params* pc, const Ctx* c, int i) {
  return pc->window_left < 0 ? -0x3fffffff : i + (c->k_len - c->q_len + pc->diagonal_offset) - pc->window_left;
}
int key_hi(const Params* pc, const Ctx* c, int i) {
  const int d = c->k_len - c->q_len + pc->diagonal_offset;
  int hi = pc->window_right < 0 ? 0x3fffffff : i + d + pc->window_right;
  return HAS(F_CAUSAL) ? min(hi, i + d) : hi;
}

bool allowed(const Params* pc, const Ctx* c, int i, int j, __global const int* q_seg, __global const int* k_seg) {
  if (i >= c->q_len || j < 0 || j >= c->k_len || j < key_lo(pc, c, i) || j > key_hi(pc, c, i)) return false;
  return !HAS(F_SEGMENTS) || q_seg[c->q_start + i] == k_seg[c->k_start + j];
}

uint bias_index(const Params* pc, const Ctx* c, uint h, int i, int j) {
  uint bb = pc->bias_batch == 1u ? 0u : c->seq, hh = pc->bias_heads == 1u ? 0u : h;
  return ((bb * pc->bias_heads + hh) * pc->seq_q + (uint)i) * pc->seq_k + (uint)j;
}

// The transformed logit in base 2 from x = (q * qscale) . k, or NEG where (i, j) is not allowed.
float logit(const Params* pc, const Ctx* c, float x, uint h, int i, int j, __global const float* bias,
            __global const int* q_seg, __global const int* k_seg) {
  if (!allowed(pc, c, i, j, q_seg, k_seg)) return NEG;
  float t = x;
  if (HAS(F_BIAS)) t += ejk_load(bias, bias_index(pc, c, h, i, j), BIAS_DT) * pc->bias_scale;
  if (HAS(F_SOFTCAP)) {
    // tanh from exp2 so its accuracy does not depend on the driver's tanh.
    float e = exp2(fabs(t) * (-2.0f * LOG2E));
    float th = (1.0f - e) / (1.0f + e);
    t = pc->cap2 * (t < 0.0f ? -th : th);
  }
  return t;
}

float keep(const Params* pc, const Ctx* c, uint h, int i, int j) {
  return ejk_dropout_keep(c->seq, h, (uint)i, (uint)j, pc->seed_lo, pc->seed_hi, pc->threshold) != 0u
             ? pc->keep_scale
             : 0.0f;
}

uint lse_index(const Params* pc, const Ctx* c, uint h, int i) {
  return HAS(F_VARLEN) ? h * pc->total_q + (uint)(c->q_start + i) : (c->seq * pc->heads + h) * pc->seq_q + (uint)i;
}

// ---- the tiles a pass visits ----------------------------------------------------------------
// A pass walks tiles of `size` elements along one axis (keys for the forward and dq passes,
// queries for dk/dv) for a tile of the other axis: every tile from `first` to `last`, or, in
// SPARSE programs (block_sparse_attention's layouts, blocks of LBQ queries and LBK keys), only
// those of the live blocks in the tile's row of the block lists. A tile lies within one block of
// the layout (the host admits only tiles that divide the blocks), so a block's tiles are live or
// skipped whole; the masks still apply inside them. The walk is the same for every work-item,
// so the barriers of the loops around it stay uniform.
#ifndef SPARSE
#define SPARSE 0
#endif

typedef struct {
  int next, last;
#if SPARSE
  __global const int* list;  // the row's block indices
  int e, count, per, first, end;
#endif
} Walk;

Walk walk_range(int first, int last) {
  Walk w;
  w.next = first;
  w.last = last;
#if SPARSE
  w.list = 0;
  w.e = w.count = 0;
  w.per = 1;
  w.first = first;
  w.end = last;
#endif
  return w;
}

// The next tile, or -1 after the last.
int walk_next(Walk* w) {
#if SPARSE
  while (w->next > w->end) {
    if (w->e >= w->count) return -1;
    const int b = w->list[w->e++];
    w->next = max(b * w->per, w->first);
    w->end = min(b * w->per + w->per - 1, w->last);
  }
  return w->next++;
#else
  return w->next <= w->last ? w->next++ : -1;
#endif
}

#if SPARSE
// Row (sequence, head h, block) of lists of `blocks` rows per head.
int list_row(const Params* pc, const Ctx* c, uint h, int blocks, int block) {
  const int heads = HAS(F_LIST_HEADS) ? (int)pc->heads : 1;
  return ((HAS(F_LIST_BATCH) ? (int)c->seq : 0) * heads + (HAS(F_LIST_HEADS) ? (int)h : 0)) * blocks + block;
}

// Tiles first .. last of `size` elements within the live blocks (of `block` elements) of row
// `row` of counts / indices (rows of `len` entries).
Walk walk_list(int first, int last, int size, int block, __global const int* counts, __global const int* indices, int row,
               int len) {
  Walk w = walk_range(first, last);
  w.list = indices + row * len;
  w.count = counts[row];
  w.per = block / size;
  w.next = 1;
  w.end = 0;  // no block open yet
  return w;
}

#define NBQ EJK_CEIL_DIV((int)pc->seq_q, LBQ)
#define NBK EJK_CEIL_DIV((int)pc->seq_k, LBK)
// The key tiles of the query tile from query i0 of head h; the query tiles of the key tile from j0.
#define KEY_TILES(h, i0, first, last, size) \
  walk_list(first, last, size, LBK, kv_count, kv_index, list_row(pc, c, h, NBQ, (i0) / LBQ), NBK)
#define QUERY_TILES(h, j0, first, last, size) \
  walk_list(first, last, size, LBQ, q_count, q_index, list_row(pc, c, h, NBK, (j0) / LBK), NBQ)
#define FWD_LISTS , __global const int *kv_count, __global const int *kv_index
#define BWD_LISTS FWD_LISTS, __global const int *q_count, __global const int *q_index
#else
#define KEY_TILES(h, i0, first, last, size) walk_range(first, last)
#define QUERY_TILES(h, j0, first, last, size) walk_range(first, last)
#define FWD_LISTS
#define BWD_LISTS
#endif

// The argument lists: every backward pass takes the same one (SPARSE programs the block lists
// after it).
#define FWD_ARGS                                                                                              \
  Params P, EJK_LOCAL_ARG(float, sh), __global const float *q, __global const float *k, __global const float *v,    \
      __global const float *bias, __global const float *sinks, __global const int *cu_q,                      \
      __global const int *cu_k, __global const int *q_seg, __global const int *k_seg, __global float *out,    \
      __global float *lse FWD_LISTS
#define BWD_ARGS                                                                                              \
  Params P, EJK_LOCAL_ARG(float, sh), __global const float *q, __global const float *k, __global const float *v,    \
      __global const float *out, __global const float *dout, __global const float *lse,                      \
      __global const float *bias, __global const float *sinks, __global const int *cu_q,                      \
      __global const int *cu_k, __global const int *q_seg, __global const int *k_seg, __global float *dq,     \
      __global float *dk, __global float *dv, __global float *dbias, __global float *dsinks,                  \
      __global float *delta, __global float *part, __global float *dbscr, __global float *dqsum BWD_LISTS
