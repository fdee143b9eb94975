// flash_attention and flash_attention_bwd on Vulkan: one scalar design shared by every pass,
// included by flash_attention_<pass>[16].comp with PASS (FA_FWD, FA_PREP, FA_DKDV, FA_DQ,
// FA_FINISH) and ELEM16 (0: every array f32; 1: 16-bit storage, any mix of f32/f16/bf16) set.
// Semantics: flash_attention.hpp. Accumulation is f32 throughout; logits are kept in base 2
// (z * log2 e, with log2 e folded into the query scale) so every exponential is an exp2.
//
// Tiling. A workgroup of RX x RY invocations owns a block of BQ queries (forward, dq) or BK keys
// (dk/dv) of one sequence and head. Score tiles [BQ][BK] are spread so that invocation (x, y)
// holds rows y + i*RY and columns x + j*RX in registers; output tiles [rows][head_dim] likewise
// hold columns x + j*RX. Operand rows are staged in shared memory as f32 with an odd row stride,
// so the invocations of a subgroup that read different rows hit different banks. Each key block
// takes three barriers; nothing is atomic, so every result is deterministic.
#extension GL_EXT_control_flow_attributes : require
#if ELEM16
#extension GL_EXT_shader_16bit_storage : require
#endif
#include "common/philox.h"
#include "common/vulkan.glsl"

#define FA_FWD 0
#define FA_PREP 1
#define FA_DKDV 2
#define FA_DQ 3
#define FA_FINISH 4
#define FA_FWD_CM 5  // forward on cooperative matrices: flash_attention_fwd_coopmat.comp has its main
#define FA_DKDV_CM 6  // backward on cooperative matrices: flash_attention_bwd_coopmat.glsl has their mains
#define FA_DQ_CM 7
#define FA_COOPMAT (PASS == FA_FWD_CM || PASS == FA_DKDV_CM || PASS == FA_DQ_CM)

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

layout(constant_id = 3) const uint BQ = 16;     // query rows of a block
layout(constant_id = 4) const uint BK = 16;     // keys of a block
layout(constant_id = 5) const uint DMAX = 64;   // head_dim rounded up to a size class (32, 64, 128, 256)
layout(constant_id = 6) const uint RX = 8;      // = local size x
layout(constant_id = 7) const uint RY = 4;      // = local size y

const uint NT = RX * RY;
const uint WQ = BQ / RY;             // score / output rows per invocation
const uint WK = BK / RX;             // score columns per invocation
const uint WR = BK / RY;             // dk/dv rows per invocation
const uint WD = EJK_CEIL_DIV(DMAX, RX);  // output columns per invocation (some past head_dim)
const uint DS = WD * RX + 1;         // shared row stride of staged operands (odd)
const uint KS = BK + 1;              // shared row stride of score tiles

const float NEG = -3.0e38;           // a masked logit; exp2(NEG - m) is 0 for every finite m
const float LOG2E = 1.44269504088896340736;
const float LN2 = 0.69314718055994530942;

// Flags.
const uint F_CAUSAL = 1u, F_VARLEN = 2u, F_BIAS = 4u, F_SINKS = 8u, F_SEGMENTS = 16u, F_DROPOUT = 32u,
           F_SOFTCAP = 64u, F_DBIAS_SCRATCH = 128u, F_FINISH_DBIAS = 256u, F_LIST_BATCH = 512u, F_LIST_HEADS = 1024u;

layout(push_constant) uniform Push {
  uint batch, seq_q, seq_k, total_q;
  uint heads, kv_heads, group, flags;
  int window_left, window_right;
  float qscale;      // q is multiplied by this when staged
  float bias_scale;  // the bias by this before the cap
  float cap2;        // logits_soft_cap * log2 e (with F_SOFTCAP): z = cap2 * tanh(t)
  float softmax_scale, grad_scale, keep_scale;
  uint threshold, seed_lo, seed_hi;
  uint bias_batch, bias_heads;
  uint dtypes;       // bias dtype | sinks dtype << 4 (0 f32, 1 f16, 2 bf16)
  uint extra;        // prep and finish: query blocks of the prep pass per (sequence, head)
  uint head_dim;     // D <= DMAX
  uint dtype;        // q, k, v, out, dout, dq, dk, dv: 0 f32, 1 f16, 2 bf16 (f32 only without ELEM16)
  int diagonal_offset;  // added to the diagonal k_len - q_len
  // The words before are the programs' options (program.hpp), as OpenCL's Params.
  uint group_x, group_y, group_z;  // first workgroup of this dispatch (large grids are split)
} pc;

// Runtime rather than specialization constants: one pipeline serves every head_dim of a size
// class and every storage dtype, which keeps the number of pipelines a driver compiles small.
#define D pc.head_dim
#define DTYPE pc.dtype

bool flag(uint f) { return (pc.flags & f) != 0u; }

// ---- arrays -------------------------------------------------------------------------------
// Forward:  q k v bias softmax_aux cu_q cu_k q_seg kv_seg | out lse
// Backward: q k v out dout lse bias softmax_aux cu_q cu_k q_seg kv_seg | dq dk dv dbias
//           dsoftmax_aux | delta (f32 [heads][total_q]) partials (f32) dbias scratch (f32)
#if PASS == FA_FWD || PASS == FA_FWD_CM
#define B_Q 0
#define B_K 1
#define B_V 2
#define B_BIAS 3
#define B_SINKS 4
#define B_CUQ 5
#define B_CUK 6
#define B_QSEG 7
#define B_KSEG 8
#define B_OUT 9
#define B_LSE 10
#else
#define B_Q 0
#define B_K 1
#define B_V 2
#define B_OUT 3
#define B_DOUT 4
#define B_LSE 5
#define B_BIAS 6
#define B_SINKS 7
#define B_CUQ 8
#define B_CUK 9
#define B_QSEG 10
#define B_KSEG 11
#define B_DQ 12
#define B_DK 13
#define B_DV 14
#define B_DBIAS 15
#define B_DSINKS 16
#define B_DELTA 17
#define B_PART 18
#define B_DBSCR 19
#endif

layout(binding = B_Q) readonly buffer QF { float q_f[]; };
layout(binding = B_K) readonly buffer KF { float k_f[]; };
layout(binding = B_V) readonly buffer VF { float v_f[]; };
layout(binding = B_BIAS) readonly buffer BiasF { float bias_f[]; };
layout(binding = B_SINKS) readonly buffer SinksF { float sinks_f[]; };
layout(binding = B_CUQ) readonly buffer CuQ { int cu_q[]; };
layout(binding = B_CUK) readonly buffer CuK { int cu_k[]; };
layout(binding = B_QSEG) readonly buffer QSeg { int q_seg[]; };
layout(binding = B_KSEG) readonly buffer KSeg { int k_seg[]; };
layout(binding = B_OUT) buffer OutF { float out_f[]; };
layout(binding = B_LSE) buffer Lse { float lse_f[]; };
#if PASS != FA_FWD && PASS != FA_FWD_CM
layout(binding = B_DOUT) readonly buffer DOutF { float dout_f[]; };
layout(binding = B_DQ) writeonly buffer DqF { float dq_f[]; };
layout(binding = B_DK) writeonly buffer DkF { float dk_f[]; };
layout(binding = B_DV) writeonly buffer DvF { float dv_f[]; };
layout(binding = B_DBIAS) writeonly buffer DBiasF { float dbias_f[]; };
layout(binding = B_DSINKS) writeonly buffer DSinksF { float dsinks_f[]; };
layout(binding = B_DELTA) buffer Delta { float delta_f[]; };
layout(binding = B_PART) buffer Part { float part_f[]; };
layout(binding = B_DBSCR) buffer DbScr { float dbscr_f[]; };
#endif

#if ELEM16
layout(binding = B_Q) readonly buffer QH { uint16_t q_h[]; };
layout(binding = B_K) readonly buffer KH { uint16_t k_h[]; };
layout(binding = B_V) readonly buffer VH { uint16_t v_h[]; };
layout(binding = B_BIAS) readonly buffer BiasH { uint16_t bias_h[]; };
layout(binding = B_SINKS) readonly buffer SinksH { uint16_t sinks_h[]; };
layout(binding = B_OUT) buffer OutH { uint16_t out_h[]; };
#if PASS != FA_FWD && PASS != FA_FWD_CM
layout(binding = B_DOUT) readonly buffer DOutH { uint16_t dout_h[]; };
layout(binding = B_DQ) writeonly buffer DqH { uint16_t dq_h[]; };
layout(binding = B_DK) writeonly buffer DkH { uint16_t dk_h[]; };
layout(binding = B_DV) writeonly buffer DvH { uint16_t dv_h[]; };
layout(binding = B_DBIAS) writeonly buffer DBiasH { uint16_t dbias_h[]; };
layout(binding = B_DSINKS) writeonly buffer DSinksH { uint16_t dsinks_h[]; };
#endif

#define LOAD(name, i, dt) ((dt) == 0u ? name##_f[i] : EJK_LD16(name##_h, i, dt))
#define STORE(name, i, dt, x)            \
  if ((dt) == 0u) name##_f[i] = (x);     \
  else EJK_ST16(name##_h, i, dt, x)
#else
#define LOAD(name, i, dt) (name##_f[i])
#define STORE(name, i, dt, x) name##_f[i] = (x)
#endif

uint bias_dtype() { return pc.dtypes & 15u; }
uint sinks_dtype() { return (pc.dtypes >> 4) & 15u; }

// ---- problem geometry ----------------------------------------------------------------------

uint tx, ty, tid;
uint seq, head;                  // sequence (batch index) and head of this workgroup
int q_start, q_len, k_start, k_len;

void sequence_bounds(uint b) {
  if (flag(F_VARLEN)) {
    q_start = cu_q[b];
    q_len = cu_q[b + 1u] - q_start;
    k_start = cu_k[b];
    k_len = cu_k[b + 1u] - k_start;
  } else {
    q_start = int(b * pc.seq_q);
    q_len = int(pc.seq_q);
    k_start = int(b * pc.seq_k);
    k_len = int(pc.seq_k);
  }
}

// Keys query i may see before segment ids: [key_lo(i), key_hi(i)] (flash_attention.hpp).
int key_lo(int i) { return pc.window_left < 0 ? -0x3fffffff : i + (k_len - q_len + pc.diagonal_offset) - pc.window_left; }
int key_hi(int i) {
  const int d = k_len - q_len + pc.diagonal_offset;
  int hi = pc.window_right < 0 ? 0x3fffffff : i + d + pc.window_right;
  return flag(F_CAUSAL) ? min(hi, i + d) : hi;
}
bool allowed(int i, int j) {
  if (i >= q_len || j < 0 || j >= k_len || j < key_lo(i) || j > key_hi(i)) return false;
  return !flag(F_SEGMENTS) || q_seg[q_start + i] == k_seg[k_start + j];
}

uint bias_index(uint h, int i, int j) {
  uint bb = pc.bias_batch == 1u ? 0u : seq, hh = pc.bias_heads == 1u ? 0u : h;
  return ((bb * pc.bias_heads + hh) * pc.seq_q + uint(i)) * pc.seq_k + uint(j);
}

// The transformed logit in base 2 from x = (q * qscale) . k, or NEG where (i, j) is not allowed.
float logit(float x, uint h, int i, int j) {
  if (!allowed(i, j)) return NEG;
  float t = x;
  if (flag(F_BIAS)) t += LOAD(bias, bias_index(h, i, j), bias_dtype()) * pc.bias_scale;
  if (flag(F_SOFTCAP)) {
    // tanh from exp2 so its accuracy does not depend on the driver's tanh.
    float e = exp2(abs(t) * (-2.0 * LOG2E));
    float th = (1.0 - e) / (1.0 + e);
    t = pc.cap2 * (t < 0.0 ? -th : th);
  }
  return t;
}

float keep(uint h, int i, int j) {
  return ejk_dropout_keep(seq, h, uint(i), uint(j), pc.seed_lo, pc.seed_hi, pc.threshold) != 0u ? pc.keep_scale : 0.0;
}

uint lse_index(uint h, int i) {
  return flag(F_VARLEN) ? h * pc.total_q + uint(q_start + i) : (seq * pc.heads + h) * pc.seq_q + uint(i);
}

// ---- the tiles a pass visits ----------------------------------------------------------------
// As flash_attention_common.cl's: a pass walks tiles of `size` elements along one axis (keys for
// the forward and dq passes, queries for dk/dv): every tile from `first` to `last`, or in SPARSE
// modules (block_sparse_attention's layouts, blocks of LBQ queries and LBK keys) only those of
// the live blocks in the tile's row of the block lists, bound after the pass's own arrays
// (kv_count, kv_index; the backward's passes also q_count, q_index). Tiles divide the blocks.
#ifndef SPARSE
#define SPARSE 0
#endif

struct Walk {
  int next, last;
  int list, e, count, per, first, end;  // SPARSE: the row's first entry, entry e of count, ...
  bool transposed;                      // ... of the transposed lists
};

Walk walk_range(int first, int last) {
  return Walk(first, last, 0, 0, 0, 1, first, last, false);
}

#if SPARSE
layout(constant_id = 9) const int LBQ = 64;
layout(constant_id = 10) const int LBK = 64;
#if PASS == FA_FWD || PASS == FA_FWD_CM
#define B_KVC 11
#else
#define B_KVC 20
#endif
layout(binding = B_KVC) readonly buffer KvCount { int kv_count[]; };
layout(binding = B_KVC + 1) readonly buffer KvIndex { int kv_index[]; };
#if PASS != FA_FWD && PASS != FA_FWD_CM
layout(binding = B_KVC + 2) readonly buffer QCount { int q_count[]; };
layout(binding = B_KVC + 3) readonly buffer QIndex { int q_index[]; };
int list_entry(bool transposed, int at) { return transposed ? q_index[at] : kv_index[at]; }
int list_count(bool transposed, int row) { return transposed ? q_count[row] : kv_count[row]; }
#else
int list_entry(bool transposed, int at) { return kv_index[at]; }
int list_count(bool transposed, int row) { return kv_count[row]; }
#endif

// Row (sequence, head h, block) of lists of `blocks` rows per head.
int list_row(uint h, int blocks, int block) {
  const int heads = flag(F_LIST_HEADS) ? int(pc.heads) : 1;
  return ((flag(F_LIST_BATCH) ? int(seq) : 0) * heads + (flag(F_LIST_HEADS) ? int(h) : 0)) * blocks + block;
}

Walk walk_list(int first, int last, int size, int block, bool transposed, int row, int len) {
  // No block open yet: next > end.
  return Walk(1, last, row * len, 0, list_count(transposed, row), block / size, first, 0, transposed);
}

#define NBQ ((int(pc.seq_q) + LBQ - 1) / LBQ)
#define NBK ((int(pc.seq_k) + LBK - 1) / LBK)
#define KEY_TILES(h, i0, first, last, size) walk_list(first, last, size, LBK, false, list_row(h, NBQ, (i0) / LBQ), NBK)
#define QUERY_TILES(h, j0, first, last, size) walk_list(first, last, size, LBQ, true, list_row(h, NBK, (j0) / LBK), NBQ)
#else
#define KEY_TILES(h, i0, first, last, size) walk_range(first, last)
#define QUERY_TILES(h, j0, first, last, size) walk_range(first, last)
#endif

// The next tile, or -1 after the last.
int walk_next(inout Walk w) {
#if SPARSE
  while (w.next > w.end) {
    if (w.e >= w.count) return -1;
    const int b = list_entry(w.transposed, w.list + w.e);
    ++w.e;
    w.next = max(b * w.per, w.first);
    w.end = min(b * w.per + w.per - 1, w.last);
  }
#else
  if (w.next > w.last) return -1;
#endif
  return w.next++;
}

// ---- staging -------------------------------------------------------------------------------

#if !FA_COOPMAT
#if PASS == FA_FWD
const uint SH = BQ * DS + BK * DS + BQ * KS + BQ * RX;
#elif PASS == FA_DKDV
const uint SH = 2 * BK * DS + BQ * DS + 2 * BQ * KS + 2 * BQ;
#elif PASS == FA_DQ
const uint SH = 2 * BQ * DS + BK * DS + BQ * KS + 2 * BQ;
#elif PASS == FA_PREP
const uint PREP_LANES = 16;  // invocations a row (flash_attention.cl's PREP_LANES)
const uint SH = NT * (PREP_LANES + 1);
#else
const uint SH = NT;
#endif
shared float sh[SH];

const uint SRC_Q = 0u, SRC_K = 1u, SRC_V = 2u, SRC_OUT = 3u, SRC_DOUT = 4u;

float load_src(uint src, uint e) {
  if (src == SRC_Q) return LOAD(q, e, DTYPE);
  if (src == SRC_K) return LOAD(k, e, DTYPE);
  if (src == SRC_V) return LOAD(v, e, DTYPE);
#if PASS != FA_FWD
  if (src == SRC_DOUT) return LOAD(dout, e, DTYPE);
#endif
  return LOAD(out, e, DTYPE);
}

// rows [0, n) of sh at `base` (stride DS) = tokens tok0.. of head h of `src` (nh heads) * scale;
// rows from `valid` on are zero.
void stage(uint base, uint n, int tok0, int valid, uint nh, uint h, uint src, float scale) {
  // Row and column advance by NT elements per step, without a division per element.
  const uint rstep = NT / D, dstep = NT - rstep * D;
  uint r = tid / D, d = tid - r * D;
  while (r < n) {
    float x = 0.0;
    if (int(r) < valid) x = load_src(src, (uint(tok0 + int(r)) * nh + h) * D + d) * scale;
    sh[base + r * DS + d] = x;
    r += rstep;
    d += dstep;
    if (d >= D) {
      d -= D;
      ++r;
    }
  }
}

// tile[i][j] = sh[a + (ty + i RY) row] . sh[b + (tx + j RX) row] over D.
float tile[WQ][WK];
void dots(uint a, uint b) {
  [[unroll]] for (uint i = 0; i < WQ; ++i)
    [[unroll]] for (uint j = 0; j < WK; ++j) tile[i][j] = 0.0;
  uint a0 = a + ty * DS, b0 = b + tx * DS;
  for (uint d = 0; d < D; ++d) {
    float x[WQ], y[WK];
    [[unroll]] for (uint i = 0; i < WQ; ++i) x[i] = sh[a0 + i * RY * DS + d];
    [[unroll]] for (uint j = 0; j < WK; ++j) y[j] = sh[b0 + j * RX * DS + d];
    [[unroll]] for (uint i = 0; i < WQ; ++i)
      [[unroll]] for (uint j = 0; j < WK; ++j) tile[i][j] = fma(x[i], y[j], tile[i][j]);
  }
}

void setup() {
  tx = gl_LocalInvocationID.x;
  ty = gl_LocalInvocationID.y;
  tid = ty * RX + tx;
}
#endif  // !FA_COOPMAT

#if PASS == FA_FWD
// ---- forward -------------------------------------------------------------------------------

float acc[WQ][WD];

void main() {
  setup();
  const uint qb = gl_WorkGroupID.x + pc.group_x;
  head = gl_WorkGroupID.y + pc.group_y;
  seq = gl_WorkGroupID.z + pc.group_z;
  sequence_bounds(seq);
  const int i0 = int(qb * BQ);
  if (i0 >= q_len) return;  // packed input: this sequence is shorter than max_seqlen_q
  const int rows = min(int(BQ), q_len - i0);
  const uint hk = head / pc.group;
  const uint QS = 0, KV = BQ * DS, PS = KV + BK * DS, RED = PS + BQ * KS;

  float m[WQ], l[WQ];
  const float sink = flag(F_SINKS) ? LOAD(sinks, head, sinks_dtype()) * LOG2E : NEG;
  [[unroll]] for (uint i = 0; i < WQ; ++i) {
    // A sink joins the denominator as one more logit whose weight starts the running sum;
    // each invocation sums its own columns, so only column 0's holder starts at 1.
    m[i] = sink;
    l[i] = flag(F_SINKS) && tx == 0u ? 1.0 : 0.0;
    [[unroll]] for (uint j = 0; j < WD; ++j) acc[i][j] = 0.0;
  }
  stage(QS, BQ, q_start + i0, rows, pc.heads, head, SRC_Q, pc.qscale);

  const int jlo = max(0, key_lo(i0)), jhi = min(k_len - 1, key_hi(i0 + rows - 1));
  Walk tiles = KEY_TILES(head, i0, jlo / int(BK), jlo <= jhi ? jhi / int(BK) : -1, int(BK));
  for (int kb = walk_next(tiles); kb >= 0; kb = walk_next(tiles)) {
    const int j0 = kb * int(BK), n = min(int(BK), k_len - j0);
    barrier();
    stage(KV, BK, k_start + j0, n, pc.kv_heads, hk, SRC_K, 1.0);
    barrier();
    dots(QS, KV);
    [[unroll]] for (uint i = 0; i < WQ; ++i) {
      const int r = int(ty + i * RY);
      float mx = NEG;
      [[unroll]] for (uint j = 0; j < WK; ++j) {
        tile[i][j] = logit(tile[i][j], head, i0 + r, j0 + int(tx + j * RX));
        mx = max(mx, tile[i][j]);
      }
      sh[RED + uint(r) * RX + tx] = mx;
    }
    barrier();
    stage(KV, BK, k_start + j0, n, pc.kv_heads, hk, SRC_V, 1.0);
    [[unroll]] for (uint i = 0; i < WQ; ++i) {
      const uint r = ty + i * RY;
      float mx = m[i];
      for (uint x = 0; x < RX; ++x) mx = max(mx, sh[RED + r * RX + x]);
      float alpha = 1.0;
      if (mx == NEG) {  // nothing allowed in this row yet
        [[unroll]] for (uint j = 0; j < WK; ++j) tile[i][j] = 0.0;
      } else {
        alpha = exp2(m[i] - mx);
        m[i] = mx;
        float s = 0.0;
        [[unroll]] for (uint j = 0; j < WK; ++j) {
          tile[i][j] = exp2(tile[i][j] - mx);
          s += tile[i][j];
        }
        l[i] = l[i] * alpha + s;
      }
      [[unroll]] for (uint j = 0; j < WK; ++j) {
        float p = tile[i][j];
        if (flag(F_DROPOUT) && p != 0.0) p *= keep(head, i0 + int(r), j0 + int(tx + j * RX));
        sh[PS + r * KS + tx + j * RX] = p;
      }
      [[unroll]] for (uint j = 0; j < WD; ++j) acc[i][j] *= alpha;
    }
    barrier();
    for (uint c = 0; c < BK; ++c) {
      float vv[WD];
      [[unroll]] for (uint j = 0; j < WD; ++j) vv[j] = sh[KV + c * DS + tx + j * RX];
      [[unroll]] for (uint i = 0; i < WQ; ++i) {
        const float p = sh[PS + (ty + i * RY) * KS + c];
        [[unroll]] for (uint j = 0; j < WD; ++j) acc[i][j] = fma(p, vv[j], acc[i][j]);
      }
    }
  }

  // Row sums: each invocation holds its columns' share.
  barrier();
  [[unroll]] for (uint i = 0; i < WQ; ++i) sh[RED + (ty + i * RY) * RX + tx] = l[i];
  barrier();
  [[unroll]] for (uint i = 0; i < WQ; ++i) {
    const int r = int(ty + i * RY);
    if (r >= rows) continue;
    float s = 0.0;
    for (uint x = 0; x < RX; ++x) s += sh[RED + uint(r) * RX + x];
    const uint tok = uint(q_start + i0 + r);
    const float inv = s > 0.0 ? 1.0 / s : 0.0;
    [[unroll]] for (uint j = 0; j < WD; ++j) {
      const uint d = tx + j * RX;
      if (d < D) STORE(out, (tok * pc.heads + head) * D + d, DTYPE, acc[i][j] * inv);
    }
    if (tx == 0u) lse_f[lse_index(head, i0 + r)] = s > 0.0 ? (m[i] + log2(s)) * LN2 : uintBitsToFloat(0xff800000u);
  }
}

#elif PASS == FA_PREP
// ---- backward: delta = dout . out per row, and per-block shares of dsoftmax_aux -------------
// local size NT x 1 for NT query rows. PREP_LANES invocations share a row, each summing every
// PREP_LANES-th column, so that a load reads adjacent elements of a row; the row's partial sums
// are then added in a fixed order (rows of sh padded to an odd stride).

void main() {
  setup();
  const uint qb = gl_WorkGroupID.x + pc.group_x;
  head = gl_WorkGroupID.y + pc.group_y;
  seq = gl_WorkGroupID.z + pc.group_z;
  sequence_bounds(seq);
  const uint lane = tid % PREP_LANES;
  for (uint r = tid / PREP_LANES; r < NT; r += NT / PREP_LANES) {
    const int i = int(qb * NT + r);
    float s = 0.0;
    if (i < q_len) {
      const uint base = (uint(q_start + i) * pc.heads + head) * D;
      for (uint d = lane; d < D; d += PREP_LANES) s = fma(LOAD(out, base + d, DTYPE), LOAD(dout, base + d, DTYPE), s);
    }
    sh[r * (PREP_LANES + 1) + lane] = s;
  }
  barrier();
  const int i = int(qb * NT + tid);
  float s = 0.0;
  for (uint l = 0; l < PREP_LANES; ++l) s += sh[tid * (PREP_LANES + 1) + l];
  float part = 0.0;
  if (i < q_len) {
    const uint tok = uint(q_start + i);
    delta_f[head * pc.total_q + tok] = s;
    if (flag(F_SINKS)) {
      const float lse = lse_f[lse_index(head, i)];
      if (!isinf(lse)) part = -exp(LOAD(sinks, head, sinks_dtype()) - lse) * s;
    }
  }
  if (!flag(F_SINKS)) return;
  // Fixed-order tree: the same sums in the same order on every run.
  barrier();
  sh[tid] = part;
  barrier();
  for (uint w = NT / 2u; w > 0u; w /= 2u) {
    if (tid < w) sh[tid] += sh[tid + w];
    barrier();
  }
  if (tid == 0u) part_f[(seq * pc.heads + head) * pc.extra + qb] = sh[0];
}

#elif PASS == FA_DKDV
// ---- backward: dk, dv (and dbias) for one key block of one kv head --------------------------

float dk[WR][WD], dv[WR][WD];
float pm[WQ][WK];

void main() {
  setup();
  const uint kb = gl_WorkGroupID.x + pc.group_x;
  const uint hk = gl_WorkGroupID.y + pc.group_y;
  seq = gl_WorkGroupID.z + pc.group_z;
  sequence_bounds(seq);
  const int j0 = int(kb * BK);
  if (j0 >= k_len) return;
  const int n = min(int(BK), k_len - j0);
  const uint KSH = 0, VSH = BK * DS, XS = 2 * BK * DS, PD = XS + BQ * DS, DU = PD + BQ * KS, LS = DU + BQ * KS,
             DL = LS + BQ;
  [[unroll]] for (uint i = 0; i < WR; ++i)
    [[unroll]] for (uint j = 0; j < WD; ++j) dk[i][j] = dv[i][j] = 0.0;
  stage(KSH, BK, k_start + j0, n, pc.kv_heads, hk, SRC_K, 1.0);
  stage(VSH, BK, k_start + j0, n, pc.kv_heads, hk, SRC_V, 1.0);
  const bool dbias = flag(F_BIAS);
  const bool scratch = flag(F_DBIAS_SCRATCH);

  for (uint h = hk * pc.group; h < (hk + 1u) * pc.group; ++h) {
    Walk tiles = QUERY_TILES(h, j0, 0, q_len > 0 ? (q_len - 1) / int(BQ) : -1, int(BQ));
    for (int qtile = walk_next(tiles); qtile >= 0; qtile = walk_next(tiles)) {
      const int i0 = qtile * int(BQ);
      const int rows = min(int(BQ), q_len - i0);
      // dbias entries of blocks no query of which sees these keys are zero.
      if (key_hi(i0 + rows - 1) < j0 || key_lo(i0) > j0 + n - 1) {
        if (dbias)
          for (uint e = tid; e < uint(rows * n); e += NT) {
            const int r = int(e) / n, c = int(e) - r * n;
            const uint at = ((seq * pc.heads + h) * pc.seq_q + uint(i0 + r)) * pc.seq_k + uint(j0 + c);
            if (scratch) dbscr_f[at] = 0.0;
            else {
              STORE(dbias, at, bias_dtype(), 0.0);
            }
          }
        continue;
      }
      barrier();
      stage(XS, BQ, q_start + i0, rows, pc.heads, h, SRC_DOUT, 1.0);
      for (uint r = tid; r < BQ; r += NT) {
        const bool inr = int(r) < rows;
        sh[LS + r] = inr ? lse_f[lse_index(h, i0 + int(r))] * LOG2E : 0.0;
        sh[DL + r] = inr ? delta_f[h * pc.total_q + uint(q_start + i0 + int(r))] : 0.0;
      }
      barrier();
      dots(XS, VSH);  // dP = dout . v
      [[unroll]] for (uint i = 0; i < WQ; ++i)
        [[unroll]] for (uint j = 0; j < WK; ++j) pm[i][j] = tile[i][j];
      barrier();
      stage(XS, BQ, q_start + i0, rows, pc.heads, h, SRC_Q, pc.qscale);
      barrier();
      dots(XS, KSH);
      [[unroll]] for (uint i = 0; i < WQ; ++i) {
        const uint r = ty + i * RY;
        const float lse2 = sh[LS + r], dlt = sh[DL + r];
        [[unroll]] for (uint j = 0; j < WK; ++j) {
          const uint c = tx + j * RX;
          const int qi = i0 + int(r), kj = j0 + int(c);
          const float z = logit(tile[i][j], h, qi, kj);
          const float p = z == NEG || isinf(lse2) ? 0.0 : exp2(z - lse2);
          float dp = pm[i][j], pd = p;
          if (flag(F_DROPOUT) && p != 0.0) {
            const float kp = keep(h, qi, kj);
            dp *= kp;
            pd *= kp;
          }
          float du = p * (dp - dlt);
          if (flag(F_SOFTCAP) && p != 0.0) {
            const float th = z / pc.cap2;
            du *= 1.0 - th * th;
          }
          sh[PD + r * KS + c] = pd;
          sh[DU + r * KS + c] = du;
          if (dbias && int(r) < rows && int(c) < n) {
            const uint at = ((seq * pc.heads + h) * pc.seq_q + uint(qi)) * pc.seq_k + uint(kj);
            if (scratch) dbscr_f[at] = du;
            else {
              STORE(dbias, at, bias_dtype(), du);
            }
          }
        }
      }
      barrier();
      // dk += dU^T q (q scaled; grad_scale restores softmax_scale below).
      for (uint r = 0; r < BQ; ++r) {
        float x[WD];
        [[unroll]] for (uint j = 0; j < WD; ++j) x[j] = sh[XS + r * DS + tx + j * RX];
        [[unroll]] for (uint i = 0; i < WR; ++i) {
          const float u = sh[DU + r * KS + ty + i * RY];
          [[unroll]] for (uint j = 0; j < WD; ++j) dk[i][j] = fma(u, x[j], dk[i][j]);
        }
      }
      barrier();
      stage(XS, BQ, q_start + i0, rows, pc.heads, h, SRC_DOUT, 1.0);
      barrier();
      // dv += Pd^T dout.
      for (uint r = 0; r < BQ; ++r) {
        float x[WD];
        [[unroll]] for (uint j = 0; j < WD; ++j) x[j] = sh[XS + r * DS + tx + j * RX];
        [[unroll]] for (uint i = 0; i < WR; ++i) {
          const float u = sh[PD + r * KS + ty + i * RY];
          [[unroll]] for (uint j = 0; j < WD; ++j) dv[i][j] = fma(u, x[j], dv[i][j]);
        }
      }
    }
  }

  [[unroll]] for (uint i = 0; i < WR; ++i) {
    const int c = int(ty + i * RY);
    if (c >= n) continue;
    const uint base = (uint(k_start + j0 + c) * pc.kv_heads + hk) * D;
    [[unroll]] for (uint j = 0; j < WD; ++j) {
      const uint d = tx + j * RX;
      if (d < D) {
        STORE(dk, base + d, DTYPE, dk[i][j] * pc.grad_scale);
        STORE(dv, base + d, DTYPE, dv[i][j]);
      }
    }
  }
}

#elif PASS == FA_DQ
// ---- backward: dq for one query block of one head -------------------------------------------

float acc[WQ][WD];
float pm[WQ][WK];

void main() {
  setup();
  const uint qb = gl_WorkGroupID.x + pc.group_x;
  head = gl_WorkGroupID.y + pc.group_y;
  seq = gl_WorkGroupID.z + pc.group_z;
  sequence_bounds(seq);
  const int i0 = int(qb * BQ);
  if (i0 >= q_len) return;
  const int rows = min(int(BQ), q_len - i0);
  const uint hk = head / pc.group;
  const uint QS = 0, DO = BQ * DS, YS = 2 * BQ * DS, DU = YS + BK * DS, LS = DU + BQ * KS, DL = LS + BQ;
  [[unroll]] for (uint i = 0; i < WQ; ++i)
    [[unroll]] for (uint j = 0; j < WD; ++j) acc[i][j] = 0.0;
  stage(QS, BQ, q_start + i0, rows, pc.heads, head, SRC_Q, pc.qscale);
  stage(DO, BQ, q_start + i0, rows, pc.heads, head, SRC_DOUT, 1.0);
  for (uint r = tid; r < BQ; r += NT) {
    const bool inr = int(r) < rows;
    sh[LS + r] = inr ? lse_f[lse_index(head, i0 + int(r))] * LOG2E : 0.0;
    sh[DL + r] = inr ? delta_f[head * pc.total_q + uint(q_start + i0 + int(r))] : 0.0;
  }

  const int jlo = max(0, key_lo(i0)), jhi = min(k_len - 1, key_hi(i0 + rows - 1));
  Walk tiles = KEY_TILES(head, i0, jlo / int(BK), jlo <= jhi ? jhi / int(BK) : -1, int(BK));
  for (int kb = walk_next(tiles); kb >= 0; kb = walk_next(tiles)) {
    const int j0 = kb * int(BK), n = min(int(BK), k_len - j0);
    barrier();
    stage(YS, BK, k_start + j0, n, pc.kv_heads, hk, SRC_V, 1.0);
    barrier();
    dots(DO, YS);  // dP = dout . v
    [[unroll]] for (uint i = 0; i < WQ; ++i)
      [[unroll]] for (uint j = 0; j < WK; ++j) pm[i][j] = tile[i][j];
    barrier();
    stage(YS, BK, k_start + j0, n, pc.kv_heads, hk, SRC_K, 1.0);
    barrier();
    dots(QS, YS);
    [[unroll]] for (uint i = 0; i < WQ; ++i) {
      const uint r = ty + i * RY;
      const float lse2 = sh[LS + r], dlt = sh[DL + r];
      [[unroll]] for (uint j = 0; j < WK; ++j) {
        const uint c = tx + j * RX;
        const int qi = i0 + int(r), kj = j0 + int(c);
        const float z = logit(tile[i][j], head, qi, kj);
        const float p = z == NEG || isinf(lse2) ? 0.0 : exp2(z - lse2);
        float dp = pm[i][j];
        if (flag(F_DROPOUT) && p != 0.0) dp *= keep(head, qi, kj);
        float du = p * (dp - dlt);
        if (flag(F_SOFTCAP) && p != 0.0) {
          const float th = z / pc.cap2;
          du *= 1.0 - th * th;
        }
        sh[DU + r * KS + c] = du;
      }
    }
    barrier();
    for (uint c = 0; c < BK; ++c) {
      float kk[WD];
      [[unroll]] for (uint j = 0; j < WD; ++j) kk[j] = sh[YS + c * DS + tx + j * RX];
      [[unroll]] for (uint i = 0; i < WQ; ++i) {
        const float u = sh[DU + (ty + i * RY) * KS + c];
        [[unroll]] for (uint j = 0; j < WD; ++j) acc[i][j] = fma(u, kk[j], acc[i][j]);
      }
    }
  }

  [[unroll]] for (uint i = 0; i < WQ; ++i) {
    const int r = int(ty + i * RY);
    if (r >= rows) continue;
    const uint base = (uint(q_start + i0 + r) * pc.heads + head) * D;
    [[unroll]] for (uint j = 0; j < WD; ++j) {
      const uint d = tx + j * RX;
      if (d < D) STORE(dq, base + d, DTYPE, acc[i][j] * pc.softmax_scale);
    }
  }
}

#elif PASS == FA_FINISH
// ---- backward: deterministic reductions ----------------------------------------------------
// F_FINISH_DBIAS: dbias[bb, hh, i, j] = sum over the broadcast batch and head dimensions of the
// f32 scratch [batch, heads, seq_q, seq_k], in a fixed order. Otherwise: dsoftmax_aux[h] = sum
// of the prep pass's shares, in a fixed order. A 1-D grid strides over the outputs.

void main() {
  setup();
  const uint stride = gl_NumWorkGroups.x * NT;
  if (flag(F_FINISH_DBIAS)) {
    const uint plane = pc.seq_q * pc.seq_k, total = pc.bias_batch * pc.bias_heads * plane;
    for (uint e = gl_WorkGroupID.x * NT + tid; e < total; e += stride) {
      const uint ij = e % plane, bh = e / plane, hh = bh % pc.bias_heads, bb = bh / pc.bias_heads;
      const uint b0 = pc.bias_batch == 1u ? 0u : bb, b1 = pc.bias_batch == 1u ? pc.batch : bb + 1u;
      const uint h0 = pc.bias_heads == 1u ? 0u : hh, h1 = pc.bias_heads == 1u ? pc.heads : hh + 1u;
      float s = 0.0;
      for (uint b = b0; b < b1; ++b)
        for (uint h = h0; h < h1; ++h) s += dbscr_f[(b * pc.heads + h) * plane + ij];
      STORE(dbias, e, bias_dtype(), s);
    }
  } else {
    for (uint h = gl_WorkGroupID.x * NT + tid; h < pc.heads; h += stride) {
      float s = 0.0;
      for (uint b = 0; b < pc.batch; ++b)
        for (uint x = 0; x < pc.extra; ++x) s += part_f[(b * pc.heads + h) * pc.extra + x];
      STORE(dsinks, h, sinks_dtype(), s);
    }
  }
}
#endif
