// native_sparse_attention on Vulkan: the passes of nsa.cl (see vulkan.cpp for the plan), one
// module each, included with PASS and ELEM16 set (0: f32 arrays; 1: f16 or bf16 arrays through
// 16-bit storage, the dtype push constant picking which). Work-group size, tile, heads per
// group and head dims are specialization constants; the rest are push constants.
#extension GL_EXT_control_flow_attributes : require
#if ELEM16
#extension GL_EXT_shader_16bit_storage : require
#endif
#include "common/vulkan.glsl"

#define NSA_POOL 0
#define NSA_FWD 1
#define NSA_BWD_DQ 2
#define NSA_BWD_DCMP 3
#define NSA_BWD_DKV 4
#define NSA_BWD_CLEAR 5
#define NSA_BWD_MARK 6

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
layout(constant_id = 3) const uint TILE = 16;  // keys per staged tile
layout(constant_id = 4) const uint HPG = 1;    // query heads per group
layout(constant_id = 5) const uint DK = 64;    // head_dim_k
layout(constant_id = 6) const uint DV = 64;    // head_dim_v

const uint THREADS = gl_WorkGroupSize.x;
// Staged key and value rows are padded by one word, so that invocations reading the same column
// of different rows hit different shared-memory banks.
const uint KS = DK + 1, VS = DV + 1;
#define NEG_INF uintBitsToFloat(0xff800000u)

layout(push_constant) uniform Push {
  uint tokens, nseq, H, G, S, BS, dtype;
  float scale;
  uint token0;  // the dispatch's first token: launches are split where tokens exceed the group count
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

// Sequences: cu is bound by every pass that needs it. LOCATE_SEQ also gives the sequence's index.
#define LOCATE_SEQ(cu, t, seq, bos, eos)     \
  {                                          \
    uint lo_ = 0u, hi_ = pc.nseq;            \
    while (hi_ - lo_ > 1u) {                 \
      const uint mid_ = (lo_ + hi_) / 2u;    \
      if (uint(cu[mid_]) <= (t)) lo_ = mid_; \
      else hi_ = mid_;                       \
    }                                        \
    seq = lo_;                               \
    bos = uint(cu[lo_]);                     \
    eos = uint(cu[lo_ + 1u]);                \
  }
#define LOCATE(cu, t, bos, eos)      \
  {                                  \
    uint seq_;                       \
    LOCATE_SEQ(cu, t, seq_, bos, eos) \
  }

// The backward's inverse of the selection (nsa.cl's nsa_bwd_mark, SelectionBitmap in nsa.hpp): per
// (block, kv head) SEL_WORDS words of bits, one per query from the block's first token on that
// lists the block; a block starting at token j of sequence s is slot j / BS + s.
#define SEL_WORDS ((pc.tokens + 31u) / 32u)
#define SEL_AT(slot, h) (((slot) * pc.H + (h)) * SEL_WORDS)

#if PASS == NSA_BWD_CLEAR
layout(binding = 0) writeonly buffer SEL { uint sel[]; };

void main() {
  const uint words = (pc.tokens / pc.BS + pc.nseq) * pc.H * SEL_WORDS;
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < words; i += stride) sel[i] = 0u;
}
#endif

#if PASS == NSA_BWD_MARK
layout(binding = 0) readonly buffer BI { int bi[]; };
layout(binding = 1) readonly buffer BC { int bc[]; };
layout(binding = 2) readonly buffer CU { int cu[]; };
layout(binding = 3) buffer SEL { uint sel[]; };

// One invocation per (token, kv head), the x and y of the grid flattened.
void main() {
  const uint i = gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x + gl_GlobalInvocationID.x;
  if (i >= pc.tokens * pc.H) return;
  const uint t = i / pc.H, h = i % pc.H;
  uint seq, bos, eos;
  LOCATE_SEQ(cu, t, seq, bos, eos);
  const int cnt = bc[i];
  for (int k = 0; k < cnt; ++k) {
    const int e = bi[i * pc.S + uint(k)];
    if (e < 0 || uint(e) * pc.BS > t - bos) continue;
    const uint j = bos + uint(e) * pc.BS, rel = t - j;
    atomicOr(sel[SEL_AT(j / pc.BS + seq, h) + rel / 32u], 1u << (rel % 32u));
  }
}
#endif

#if PASS == NSA_POOL
layout(binding = 0) readonly buffer K_ { ELEM k[]; };
layout(binding = 1) readonly buffer V_ { ELEM v[]; };
layout(binding = 2) readonly buffer CU { int cu[]; };
layout(binding = 3) writeonly buffer KC { float kc[]; };
layout(binding = 4) writeonly buffer VC { float vc[]; };

void main() {
  const uint W = DK + DV, H = pc.H, BS = pc.BS;
  const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * THREADS;
  if (i >= pc.tokens * H * W) return;
  const uint t = i / (H * W), h = i / W % H, d = i % W;
  uint bos, eos;
  LOCATE(cu, t, bos, eos);
  if ((t - bos) % BS != 0u || t + BS > eos) return;
  float s = 0.0;
  if (d < DK) {
    for (uint j = t; j < t + BS; ++j) s += LOAD(k, (j * H + h) * DK + d);
    kc[(t * H + h) * DK + d] = s / float(BS);
  } else {
    for (uint j = t; j < t + BS; ++j) s += LOAD(v, (j * H + h) * DV + d - DK);
    vc[(t * H + h) * DV + d - DK] = s / float(BS);
  }
}
#endif

#if PASS == NSA_FWD || PASS == NSA_BWD_DQ
layout(binding = 0) readonly buffer Q_ { ELEM q[]; };
layout(binding = 1) readonly buffer K_ { ELEM k[]; };
layout(binding = 2) readonly buffer V_ { ELEM v[]; };
layout(binding = 3) readonly buffer GC { ELEM gc[]; };
layout(binding = 4) readonly buffer GS { ELEM gs[]; };
layout(binding = 5) readonly buffer BI { int bi[]; };
layout(binding = 6) readonly buffer BC { int bc[]; };
layout(binding = 7) readonly buffer CU { int cu[]; };
layout(binding = 8) readonly buffer KC { float kc[]; };
layout(binding = 9) readonly buffer VC { float vc[]; };

shared float qs[HPG * DK], kt[TILE * KS], vt[TILE * VS], sc[HPG * TILE];

void stage_pooled(uint n, uint row0, uint h) {
  const uint lid = gl_LocalInvocationID.x, H = pc.H, BS = pc.BS;
  for (uint e = lid; e < n * DK; e += THREADS) kt[e / DK * KS + e % DK] = kc[((row0 + e / DK * BS) * H + h) * DK + e % DK];
  for (uint e = lid; e < n * DV; e += THREADS) vt[e / DV * VS + e % DV] = vc[((row0 + e / DV * BS) * H + h) * DV + e % DV];
}

void stage_rows(uint n, uint row0, uint h) {
  const uint lid = gl_LocalInvocationID.x, H = pc.H;
  for (uint e = lid; e < n * DK; e += THREADS) kt[e / DK * KS + e % DK] = LOAD(k, ((row0 + e / DK) * H + h) * DK + e % DK);
  for (uint e = lid; e < n * DV; e += THREADS) vt[e / DV * VS + e % DV] = LOAD(v, ((row0 + e / DV) * H + h) * DV + e % DV);
}
#endif

#if PASS == NSA_FWD
layout(binding = 10) writeonly buffer O_ { ELEM o[]; };
layout(binding = 11) writeonly buffer OC { ELEM oc[]; };
layout(binding = 12) writeonly buffer OS { ELEM os[]; };
layout(binding = 13) writeonly buffer LSE { float lse[]; };

shared float acc[HPG * DV], first[HPG * DV], m[HPG], l[HPG], al[HPG];

void tile_step(uint n) {
  const uint lid = gl_LocalInvocationID.x;
  barrier();
  for (uint pr = lid; pr < HPG * TILE; pr += THREADS) {
    const uint g = pr / TILE, r = pr % TILE;
    if (r < n) {
      float s = 0.0;
      for (uint d = 0; d < DK; ++d) s = fma(qs[g * DK + d], kt[r * KS + d], s);
      sc[pr] = s;
    }
  }
  barrier();
  for (uint g = lid; g < HPG; g += THREADS) {
    float mx = m[g];
    for (uint r = 0; r < n; ++r) mx = max(mx, sc[g * TILE + r]);
    const float a = exp(m[g] - mx);
    float sum = 0.0;
    for (uint r = 0; r < n; ++r) {
      const float p = exp(sc[g * TILE + r] - mx);
      sc[g * TILE + r] = p;
      sum += p;
    }
    l[g] = l[g] * a + sum;
    m[g] = mx;
    al[g] = a;
  }
  barrier();
  for (uint e = lid; e < HPG * DV; e += THREADS) {
    const uint g = e / DV, d = e % DV;
    float x = acc[e] * al[g];
    for (uint r = 0; r < n; ++r) x = fma(sc[g * TILE + r], vt[r * VS + d], x);
    acc[e] = x;
  }
  barrier();
}

void main() {
  const uint H = pc.H, G = pc.G, S = pc.S, BS = pc.BS, parts = G / HPG;
  const uint t = pc.token0 + gl_WorkGroupID.x, h = gl_WorkGroupID.y / parts, part = gl_WorkGroupID.y % parts;
  const uint lid = gl_LocalInvocationID.x, th0 = t * H * G + h * G + part * HPG;
  uint bos, eos;
  LOCATE(cu, t, bos, eos);
  const uint pos = t - bos;
  for (uint e = lid; e < HPG * DK; e += THREADS) qs[e] = pc.scale * LOAD(q, th0 * DK + e);
  for (uint branch = 0; branch < 2u; ++branch) {
    for (uint e = lid; e < HPG * DV; e += THREADS) acc[e] = 0.0;
    for (uint g = lid; g < HPG; g += THREADS) {
      m[g] = NEG_INF;
      l[g] = 0.0;
    }
    if (branch == 0u) {
      const uint nc = (pos + 1u) / BS;
      for (uint c0 = 0; c0 < nc; c0 += TILE) {
        const uint n = min(TILE, nc - c0);
        stage_pooled(n, bos + c0 * BS, h);
        tile_step(n);
      }
    } else {
      const int cnt = bc[t * H + h];
      for (int i = 0; i < cnt; ++i) {
        const int e = bi[(t * H + h) * S + uint(i)];
        if (e < 0 || uint(e) * BS > pos) continue;
        const uint len = min(BS, pos - uint(e) * BS + 1u);
        for (uint j0 = 0; j0 < len; j0 += TILE) {
          const uint n = min(TILE, len - j0);
          stage_rows(n, bos + uint(e) * BS + j0, h);
          tile_step(n);
        }
      }
    }
    barrier();
    for (uint e = lid; e < HPG * DV; e += THREADS) {
      const uint g = e / DV;
      const float x = l[g] > 0.0 ? acc[e] / l[g] : 0.0;
      if (branch == 0u) {
        STORE(oc, th0 * DV + e, x);
        first[e] = x;
      } else {
        STORE(os, th0 * DV + e, x);
        STORE(o, th0 * DV + e, LOAD(gc, th0 + g) * first[e] + LOAD(gs, th0 + g) * x);
      }
    }
    for (uint g = lid; g < HPG; g += THREADS) lse[(th0 + g) * 2u + branch] = l[g] > 0.0 ? m[g] + log(l[g]) : NEG_INF;
    barrier();
  }
}
#endif

#if PASS == NSA_BWD_DQ
layout(binding = 10) readonly buffer OC { ELEM oc[]; };
layout(binding = 11) readonly buffer OS { ELEM os[]; };
layout(binding = 12) readonly buffer LSE { float lse[]; };
layout(binding = 13) readonly buffer DO_ { ELEM dout[]; };
layout(binding = 14) writeonly buffer DQ { ELEM dq[]; };
layout(binding = 15) writeonly buffer DGC { ELEM dgc[]; };
layout(binding = 16) writeonly buffer DGS { ELEM dgs[]; };
layout(binding = 17) writeonly buffer DELTA { float delta[]; };

shared float dqa[HPG * DK], dob[HPG * DV], lb[HPG], db[HPG];

void tile_step(uint n) {
  const uint lid = gl_LocalInvocationID.x;
  barrier();
  for (uint pr = lid; pr < HPG * TILE; pr += THREADS) {
    const uint g = pr / TILE, r = pr % TILE;
    if (r < n) {
      float s = 0.0, dp = 0.0;
      for (uint d = 0; d < DK; ++d) s = fma(qs[g * DK + d], kt[r * KS + d], s);
      for (uint d = 0; d < DV; ++d) dp = fma(dob[g * DV + d], vt[r * VS + d], dp);
      sc[pr] = exp(s - lb[g]) * (dp - db[g]);
    }
  }
  barrier();
  for (uint e = lid; e < HPG * DK; e += THREADS) {
    const uint g = e / DK, d = e % DK;
    float x = dqa[e];
    for (uint r = 0; r < n; ++r) x = fma(sc[g * TILE + r], kt[r * KS + d], x);
    dqa[e] = x;
  }
  barrier();
}

void main() {
  const uint H = pc.H, G = pc.G, S = pc.S, BS = pc.BS, parts = G / HPG;
  const uint t = pc.token0 + gl_WorkGroupID.x, h = gl_WorkGroupID.y / parts, part = gl_WorkGroupID.y % parts;
  const uint lid = gl_LocalInvocationID.x, th0 = t * H * G + h * G + part * HPG;
  uint bos, eos;
  LOCATE(cu, t, bos, eos);
  const uint pos = t - bos;
  for (uint e = lid; e < HPG * DK; e += THREADS) {
    qs[e] = pc.scale * LOAD(q, th0 * DK + e);
    dqa[e] = 0.0;
  }
  for (uint branch = 0; branch < 2u; ++branch) {
    barrier();
    for (uint e = lid; e < HPG * DV; e += THREADS) dob[e] = LOAD(dout, th0 * DV + e);
    barrier();
    for (uint g = lid; g < HPG; g += THREADS) {
      float D = 0.0;
      for (uint d = 0; d < DV; ++d) D = fma(dob[g * DV + d], branch == 0u ? LOAD(oc, (th0 + g) * DV + d) : LOAD(os, (th0 + g) * DV + d), D);
      const float gate = branch == 0u ? LOAD(gc, th0 + g) : LOAD(gs, th0 + g);
      if (branch == 0u) STORE(dgc, th0 + g, D);
      else STORE(dgs, th0 + g, D);
      db[g] = gate * D;
      delta[(th0 + g) * 2u + branch] = gate * D;
      lb[g] = lse[(th0 + g) * 2u + branch];
    }
    barrier();
    for (uint e = lid; e < HPG * DV; e += THREADS)
      dob[e] *= branch == 0u ? LOAD(gc, th0 + e / DV) : LOAD(gs, th0 + e / DV);
    if (branch == 0u) {
      const uint nc = (pos + 1u) / BS;
      for (uint c0 = 0; c0 < nc; c0 += TILE) {
        const uint n = min(TILE, nc - c0);
        stage_pooled(n, bos + c0 * BS, h);
        tile_step(n);
      }
    } else {
      const int cnt = bc[t * H + h];
      for (int i = 0; i < cnt; ++i) {
        const int e = bi[(t * H + h) * S + uint(i)];
        if (e < 0 || uint(e) * BS > pos) continue;
        const uint len = min(BS, pos - uint(e) * BS + 1u);
        for (uint j0 = 0; j0 < len; j0 += TILE) {
          const uint n = min(TILE, len - j0);
          stage_rows(n, bos + uint(e) * BS + j0, h);
          tile_step(n);
        }
      }
    }
  }
  barrier();
  for (uint e = lid; e < HPG * DK; e += THREADS) STORE(dq, th0 * DK + e, pc.scale * dqa[e]);
}
#endif

#if PASS == NSA_BWD_DCMP
layout(binding = 0) readonly buffer Q_ { ELEM q[]; };
layout(binding = 1) readonly buffer GC { ELEM gc[]; };
layout(binding = 2) readonly buffer CU { int cu[]; };
layout(binding = 3) readonly buffer KC { float kc[]; };
layout(binding = 4) readonly buffer VC { float vc[]; };
layout(binding = 5) readonly buffer LSE { float lse[]; };
layout(binding = 6) readonly buffer DO_ { ELEM dout[]; };
layout(binding = 7) readonly buffer DELTA { float delta[]; };
layout(binding = 8) writeonly buffer DKC { float dkc[]; };
layout(binding = 9) writeonly buffer DVC { float dvc[]; };

shared float kr[DK], vr[DV], gk[DK], gv[DV], qs[HPG * DK], dob[HPG * DV], pp[HPG], ds[HPG];

void main() {
  const uint H = pc.H, G = pc.G, BS = pc.BS;
  const uint t0 = pc.token0 + gl_WorkGroupID.x, h = gl_WorkGroupID.y, lid = gl_LocalInvocationID.x;
  uint bos, eos;
  LOCATE(cu, t0, bos, eos);
  // The token's share of its whole block's pooled gradient: the queries at its offset o in the
  // block, every BS-th (nsa.cl's nsa_bwd_dcmp says why); dkv sums the block's shares.
  const uint o = (t0 - bos) % BS, block0 = t0 - o;
  if (block0 + BS > eos) return;
  for (uint d = lid; d < DK; d += THREADS) {
    kr[d] = kc[(block0 * H + h) * DK + d];
    gk[d] = 0.0;
  }
  for (uint d = lid; d < DV; d += THREADS) {
    vr[d] = vc[(block0 * H + h) * DV + d];
    gv[d] = 0.0;
  }
  for (uint t = block0 + BS - 1u + o; t < eos; t += BS)
    for (uint g0 = 0; g0 < G; g0 += HPG) {
      const uint th0 = t * H * G + h * G + g0;
      barrier();
      for (uint e = lid; e < HPG * DK; e += THREADS) qs[e] = pc.scale * LOAD(q, th0 * DK + e);
      for (uint e = lid; e < HPG * DV; e += THREADS) dob[e] = LOAD(dout, th0 * DV + e) * LOAD(gc, th0 + e / DV);
      barrier();
      for (uint g = lid; g < HPG; g += THREADS) {
        float s = 0.0, dp = 0.0;
        for (uint d = 0; d < DK; ++d) s = fma(qs[g * DK + d], kr[d], s);
        for (uint d = 0; d < DV; ++d) dp = fma(dob[g * DV + d], vr[d], dp);
        const float p = exp(s - lse[(th0 + g) * 2u]);
        pp[g] = p;
        ds[g] = p * (dp - delta[(th0 + g) * 2u]);
      }
      barrier();
      for (uint d = lid; d < DK; d += THREADS) {
        float x = gk[d];
        for (uint g = 0; g < HPG; ++g) x = fma(ds[g], qs[g * DK + d], x);
        gk[d] = x;
      }
      for (uint d = lid; d < DV; d += THREADS) {
        float x = gv[d];
        for (uint g = 0; g < HPG; ++g) x = fma(pp[g], dob[g * DV + d], x);
        gv[d] = x;
      }
    }
  for (uint d = lid; d < DK; d += THREADS) dkc[(t0 * H + h) * DK + d] = gk[d];
  for (uint d = lid; d < DV; d += THREADS) dvc[(t0 * H + h) * DV + d] = gv[d];
}
#endif

#if PASS == NSA_BWD_DKV
layout(binding = 0) readonly buffer Q_ { ELEM q[]; };
layout(binding = 1) readonly buffer K_ { ELEM k[]; };
layout(binding = 2) readonly buffer V_ { ELEM v[]; };
layout(binding = 3) readonly buffer GS { ELEM gs[]; };
layout(binding = 4) readonly buffer BI { int bi[]; };
layout(binding = 5) readonly buffer BC { int bc[]; };
layout(binding = 6) readonly buffer CU { int cu[]; };
layout(binding = 7) readonly buffer LSE { float lse[]; };
layout(binding = 8) readonly buffer DO_ { ELEM dout[]; };
layout(binding = 9) readonly buffer DELTA { float delta[]; };
layout(binding = 10) readonly buffer DKC { float dkc[]; };
layout(binding = 11) readonly buffer DVC { float dvc[]; };
layout(binding = 12) writeonly buffer DK_ { ELEM dk[]; };
layout(binding = 13) writeonly buffer DV_ { ELEM dv[]; };
layout(binding = 14) readonly buffer SEL { uint sel[]; };

shared float kt[TILE * KS], vt[TILE * VS], gk[TILE * DK], gv[TILE * DV], qs[HPG * DK], dob[HPG * DV];
shared float pp[HPG * TILE], ds[HPG * TILE];

void main() {
  const uint H = pc.H, G = pc.G, S = pc.S, BS = pc.BS;
  const uint j0 = pc.token0 + gl_WorkGroupID.x, h = gl_WorkGroupID.y, lid = gl_LocalInvocationID.x;
  uint seq, bos, eos;
  LOCATE_SEQ(cu, j0, seq, bos, eos);
  const uint off = (j0 - bos) % BS;
  if (off % TILE != 0u) return;
  const int b = int((j0 - bos) / BS);
  const uint block0 = j0 - off;
  const uint n = min(TILE, min(block0 + BS, eos) - j0);
  for (uint e = lid; e < n * DK; e += THREADS) {
    kt[e / DK * KS + e % DK] = LOAD(k, ((j0 + e / DK) * H + h) * DK + e % DK);
    gk[e] = 0.0;
  }
  for (uint e = lid; e < n * DV; e += THREADS) {
    vt[e / DV * VS + e % DV] = LOAD(v, ((j0 + e / DV) * H + h) * DV + e % DV);
    gv[e] = 0.0;
  }
  // The queries from j0 on that list the block, in token order, from its bitmap: words of 32
  // queries, from the one holding j0.
  const uint at = SEL_AT(block0 / BS + seq, h), w0 = (j0 - block0) / 32u, w_end = (eos - block0 + 31u) / 32u;
  for (uint w = w0; w < w_end; ++w) {
    for (uint word = sel[at + w] & (w == w0 ? ~0u << ((j0 - block0) % 32u) : ~0u); word != 0u; word &= word - 1u) {
      const uint t = block0 + 32u * w + uint(findLSB(word));
      const int cnt = bc[t * H + h];
      int times = 0;
      for (int i = 0; i < cnt; ++i) times += bi[(t * H + h) * S + uint(i)] == b ? 1 : 0;
      if (times == 0) continue;
      const uint rows = min(n, t - j0 + 1u);
      for (uint g0 = 0; g0 < G; g0 += HPG) {
        const uint th0 = t * H * G + h * G + g0;
        barrier();
        for (uint e = lid; e < HPG * DK; e += THREADS) qs[e] = pc.scale * LOAD(q, th0 * DK + e);
        for (uint e = lid; e < HPG * DV; e += THREADS) dob[e] = LOAD(dout, th0 * DV + e) * LOAD(gs, th0 + e / DV);
        barrier();
        for (uint pr = lid; pr < HPG * TILE; pr += THREADS) {
          const uint g = pr / TILE, r = pr % TILE;
          float p = 0.0, s = 0.0;
          if (r < rows) {
            float x = 0.0, dp = 0.0;
            for (uint d = 0; d < DK; ++d) x = fma(qs[g * DK + d], kt[r * KS + d], x);
            for (uint d = 0; d < DV; ++d) dp = fma(dob[g * DV + d], vt[r * VS + d], dp);
            p = float(times) * exp(x - lse[(th0 + g) * 2u + 1u]);
            s = p * (dp - delta[(th0 + g) * 2u + 1u]);
          }
          pp[pr] = p;
          ds[pr] = s;
        }
        barrier();
        for (uint e = lid; e < n * DK; e += THREADS) {
          const uint r = e / DK, d = e % DK;
          float x = gk[e];
          for (uint g = 0; g < HPG; ++g) x = fma(ds[g * TILE + r], qs[g * DK + d], x);
          gk[e] = x;
        }
        for (uint e = lid; e < n * DV; e += THREADS) {
          const uint r = e / DV, d = e % DV;
          float x = gv[e];
          for (uint g = 0; g < HPG; ++g) x = fma(pp[g * TILE + r], dob[g * DV + d], x);
          gv[e] = x;
        }
      }
    }
  }
  // The pooled gradient's share (the block's tokens' shares summed in order), staged in qs and
  // dob, free after the query loop.
  const bool pooled = block0 + BS <= eos;
  const float inv = 1.0 / float(BS);
  barrier();
  for (uint d = lid; d < DK; d += THREADS) {
    float x = 0.0;
    for (uint r = 0; pooled && r < BS; ++r) x += dkc[((block0 + r) * H + h) * DK + d];
    qs[d] = inv * x;
  }
  for (uint d = lid; d < DV; d += THREADS) {
    float x = 0.0;
    for (uint r = 0; pooled && r < BS; ++r) x += dvc[((block0 + r) * H + h) * DV + d];
    dob[d] = inv * x;
  }
  barrier();
  for (uint e = lid; e < n * DK; e += THREADS) STORE(dk, ((j0 + e / DK) * H + h) * DK + e % DK, gk[e] + qs[e % DK]);
  for (uint e = lid; e < n * DV; e += THREADS) STORE(dv, ((j0 + e / DV) * H + h) * DV + e % DV, gv[e] + dob[e % DV]);
}
#endif
