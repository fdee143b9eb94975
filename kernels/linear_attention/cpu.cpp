// The linear-attention kernels on the native CPU backend: the passes of plan.hpp over the
// device's thread pool, one task per (sequence, head, slice of block_v value columns).
//   token form (recurrent):  the state slice [R, block_v] in f32, updated and read once per token;
//   chunked form (gla, lightning): per chunk of `chunk` tokens, the intra-chunk scores with their
//     relative decays, then the output from the state and the scores, then one state update
//     (a [R, chunk] x [chunk, block_v] product): the state is touched once per chunk.
// Then (backward) the gate pass, one task per (sequence, head).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.hpp"
#include "common/builtin.hpp"
#include "ejk/error.hpp"
#include "linear_attention/linear_attention.hpp"
#include "linear_attention/plan.hpp"

namespace ejk::kernels::linear_attention {
namespace {

std::size_t I(std::int64_t i) { return static_cast<std::size_t>(i); }

// Eight floats in a vector register (ymm where the caller is compiled for AVX2, two xmm
// otherwise); aligned(4): loads and stores at any float address.
typedef float v8 __attribute__((vector_size(32), aligned(4)));
typedef std::int32_t v8i __attribute__((vector_size(32), aligned(4)));

// e^x in f32 without branches or library calls, so that the loops over channels vectorise
// (std::exp does not without -ffast-math): x = n ln2 + f with |f| <= ln2 / 2, e^f by its
// Taylor polynomial to degree 6 (relative error about 2e-7), 2^n through the exponent bits.
// Arguments are log-decays: clamped to [-87, 88], where e^-87 is as good as 0.
[[gnu::always_inline]] inline float fexp(float x) {
  x = x < -87.f ? -87.f : x > 88.f ? 88.f : x;
  const float t = x * 1.44269504088896341f;
  const float n = (t + 12582912.f) - 12582912.f;  // round to nearest (|t| < 2^22)
  const float f = (x - n * 0.693145751953125f) - n * 1.428606765330187045e-06f;
  float p = 1.f / 720.f;
  p = p * f + 1.f / 120.f;
  p = p * f + 1.f / 24.f;
  p = p * f + 1.f / 6.f;
  p = p * f + 0.5f;
  p = p * f + 1.f;
  p = p * f + 1.f;
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return p * scale;
}

// An array of the storage dtype or f32, read and written as f32.
struct Array {
  void* base = nullptr;
  DType t = DType::f32;
  float operator[](std::int64_t i) const {
    switch (t) {
      case DType::f16: return f16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
      case DType::bf16: return bf16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
      default: return static_cast<const float*>(base)[i];
    }
  }
  // n consecutive elements from i into dst.
  void row(std::int64_t i, std::int64_t n, float* dst) const {
    if (t == DType::f32) {
      std::memcpy(dst, static_cast<const float*>(base) + i, static_cast<std::size_t>(n) * 4);
    } else if (t == DType::bf16) {
      const std::uint16_t* src = static_cast<const std::uint16_t*>(base) + i;
      for (std::int64_t k = 0; k < n; ++k) {
        const std::uint32_t u = std::uint32_t{src[k]} << 16;
        std::memcpy(dst + k, &u, 4);
      }
    } else {
      for (std::int64_t k = 0; k < n; ++k) dst[k] = (*this)[i + k];
    }
  }
  void set(std::int64_t i, float x) const {
    switch (t) {
      case DType::f16: static_cast<std::uint16_t*>(base)[i] = f32_to_f16(x); break;
      case DType::bf16: static_cast<std::uint16_t*>(base)[i] = f32_to_bf16(x); break;
      default: static_cast<float*>(base)[i] = x;
    }
  }
  explicit operator bool() const { return base != nullptr; }
};

// Everything one call reads and writes, by slot, plus the problem's sequences and gates.
struct Bind {
  const Problem* p = nullptr;
  Sequences seqs;
  Array g, gamma;  // gamma: f32 values for lightning, else the g_gamma array
  std::vector<float> gamma_values;
  Array slot[static_cast<int>(Slot::ds032) + 1];
  Array& operator[](Slot s) { return slot[static_cast<int>(s)]; }
  const Array& operator[](Slot s) const { return slot[static_cast<int>(s)]; }
};

struct Ctx {
  const Bind& b;
  const Pass& ps;
  std::int64_t n, h, c0, bv;  // sequence, head, first value column, columns of this task
  std::int64_t L, start;
  std::int64_t token(std::int64_t pos) const { return start + (ps.reverse ? L - 1 - pos : pos); }
  // Scalar log-decay (g + g_gamma) and the gate token of position pos; -1 when outside.
  std::int64_t gate_token(std::int64_t pos) const {
    const std::int64_t u = (ps.reverse ? L - 1 - pos : pos) + ps.shift;
    return u < 0 || u >= L ? -1 : start + u;
  }
  float scalar_gate(std::int64_t gt) const {
    if (gt < 0) return 0.f;
    float x = 0.f;
    if (b.p->has_g) x += b.g[gt * b.p->heads + h];
    if (b.p->has_gamma) x += b.gamma[h];
    return x;
  }
  std::int64_t state_index(std::int64_t r, std::int64_t c) const {
    const std::int64_t base = (n * b.p->heads + h) * ps.R * ps.C;
    return base + (ps.transposed ? c * ps.R + r : r * ps.C + c);
  }
};

// fexp on eight lanes (the compiler does not vectorise fexp's bit manipulation by itself).
[[gnu::always_inline]] inline void fexp8(v8& x) {
  const v8 lo = v8{} - 87.f, hi = v8{} + 88.f;
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
  const v8 t = x * 1.44269504088896341f;
  const v8 n = (t + 12582912.f) - 12582912.f;
  const v8 f = (x - n * 0.693145751953125f) - n * 1.428606765330187045e-06f;
  v8 p = v8{} + 1.f / 720.f;
  p = p * f + 1.f / 120.f;
  p = p * f + 1.f / 24.f;
  p = p * f + 1.f / 6.f;
  p = p * f + 0.5f;
  p = p * f + 1.f;
  p = p * f + 1.f;
  const v8i bits = (__builtin_convertvector(n, v8i) + 127) << 23;
  v8 scale;
  std::memcpy(&scale, &bits, 32);
  x = p * scale;
}

// C[m, n] (+)= sum_k A[m, k] B[k, n] with A read through strides (a transposed operand costs
// nothing), in blocks of 4 x 16 outputs held in registers across k; the edges scalar.
[[gnu::always_inline]] inline void mm(std::int64_t M, std::int64_t N, std::int64_t Kd, const float* A, std::int64_t am,
                                      std::int64_t ak, const float* B, std::int64_t bk, float* Cm, std::int64_t cm,
                                      bool accumulate) {
  std::int64_t m0 = 0;
  for (; m0 + 4 <= M; m0 += 4) {
    std::int64_t n0 = 0;
    for (; n0 + 16 <= N; n0 += 16) {
      v8 a00 = {}, a01 = {}, a10 = {}, a11 = {}, a20 = {}, a21 = {}, a30 = {}, a31 = {};
      const float* a = A + m0 * am;
      for (std::int64_t k = 0; k < Kd; ++k, a += ak) {
        const v8 b0 = *reinterpret_cast<const v8*>(B + k * bk + n0);
        const v8 b1 = *reinterpret_cast<const v8*>(B + k * bk + n0 + 8);
        const float w0 = a[0], w1 = a[am], w2 = a[2 * am], w3 = a[3 * am];
        a00 += w0 * b0, a01 += w0 * b1, a10 += w1 * b0, a11 += w1 * b1;
        a20 += w2 * b0, a21 += w2 * b1, a30 += w3 * b0, a31 += w3 * b1;
      }
      const v8 acc[4][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}};
      for (int i = 0; i < 4; ++i)
        for (int h = 0; h < 2; ++h) {
          v8* c = reinterpret_cast<v8*>(Cm + (m0 + i) * cm + n0 + 8 * h);
          *c = accumulate ? *c + acc[i][h] : acc[i][h];
        }
    }
    for (; n0 < N; ++n0)
      for (int i = 0; i < 4; ++i) {
        float acc = 0.f;
        for (std::int64_t k = 0; k < Kd; ++k) acc += A[(m0 + i) * am + k * ak] * B[k * bk + n0];
        float& c = Cm[(m0 + i) * cm + n0];
        c = accumulate ? c + acc : acc;
      }
  }
  for (; m0 < M; ++m0) {
    float* c = Cm + m0 * cm;
    if (!accumulate) std::fill(c, c + N, 0.f);
    for (std::int64_t k = 0; k < Kd; ++k) {
      const float w = A[m0 * am + k * ak];
      const float* b = B + k * bk;
      for (std::int64_t n = 0; n < N; ++n) c[n] += w * b[n];
    }
  }
}

void load_state(const Ctx& x, float* S) {
  const Array& init = x.b[x.ps.init];
  for (std::int64_t r = 0; r < x.ps.R; ++r)
    for (std::int64_t c = 0; c < x.bv; ++c) S[r * x.bv + c] = init ? init[x.state_index(r, x.c0 + c)] : 0.f;
}
void store_state(const Ctx& x, const float* S) {
  const Array& fin = x.b[x.ps.final];
  if (!fin) return;
  for (std::int64_t r = 0; r < x.ps.R; ++r)
    for (std::int64_t c = 0; c < x.bv; ++c) fin.set(x.state_index(r, x.c0 + c), S[r * x.bv + c]);
}

[[gnu::always_inline]] inline void token_task(const Ctx& x) {
  const Pass& ps = x.ps;
  const Problem& p = *x.b.p;
  const std::int64_t R = ps.R, C = ps.C, H = p.heads, bv = x.bv;
  const Array &Q = x.b[ps.query], &Kx = x.b[ps.key], &Vx = x.b[ps.value], &O = x.b[ps.out];
  const Array &RG = x.b[ps.row_gate], &CG = x.b[ps.col_gate];
  std::vector<float> S(I(R * bv)), q(I(R)), k(I(R)), rd(I(R)), v(I(bv)), cd(I(bv)), o(I(bv));
  load_state(x, S.data());
  const float kvs = static_cast<float>(ps.kv_scale), os = static_cast<float>(ps.out_scale);
  for (std::int64_t pos = 0; pos < x.L; ++pos) {
    const std::int64_t th = x.token(pos) * H + x.h, gt = x.gate_token(pos);
    const float a = x.scalar_gate(gt);
    for (std::int64_t r = 0; r < R; ++r) {
      q[I(r)] = Q[th * R + r];
      k[I(r)] = kvs * Kx[th * R + r];
      rd[I(r)] = fexp(a + (RG && gt >= 0 ? RG[(gt * H + x.h) * R + r] : 0.f));
    }
    for (std::int64_t c = 0; c < bv; ++c) {
      v[I(c)] = Vx[th * C + x.c0 + c];
      cd[I(c)] = CG && gt >= 0 ? fexp(CG[(gt * H + x.h) * C + x.c0 + c]) : 1.f;
      o[I(c)] = 0.f;
    }
    for (std::int64_t r = 0; r < R; ++r) {
      float* s = S.data() + r * bv;
      const float d = rd[I(r)], kr = k[I(r)], qr = q[I(r)];
      for (std::int64_t c = 0; c < bv; ++c) {
        s[c] = s[c] * d * cd[I(c)] + kr * v[I(c)];
        o[I(c)] += qr * s[c];
      }
    }
    for (std::int64_t c = 0; c < bv; ++c) O.set(th * C + x.c0 + c, os * o[I(c)]);
  }
  store_state(x, S.data());
}

[[gnu::always_inline]] inline void chunk_task(const Ctx& x, std::int64_t CH) {
  const Pass& ps = x.ps;
  const Problem& p = *x.b.p;
  const std::int64_t R = ps.R, C = ps.C, H = p.heads, bv = x.bv;
  const Array &Q = x.b[ps.query], &Kx = x.b[ps.key], &Vx = x.b[ps.value], &O = x.b[ps.out];
  const Array &RG = x.b[ps.row_gate], &CG = x.b[ps.col_gate];
  const bool rg = static_cast<bool>(RG), cg = static_cast<bool>(CG);
  std::vector<float> S(I(R * bv)), qs(I(CH * R)), ks(I(CH * R)), B(rg ? I(CH * R) : 0), bc(I(CH)), vs(I(CH * bv)),
      Cg(cg ? I(CH * bv) : 0), A(I(CH * CH)), Ob(I(CH * bv)), cd(I(bv));
  load_state(x, S.data());
  const float kvs = static_cast<float>(ps.kv_scale), os = static_cast<float>(ps.out_scale);
  for (std::int64_t p0 = 0; p0 < x.L; p0 += CH) {
    const std::int64_t n = std::min(CH, x.L - p0);
    // Load the chunk with cumulative log-decays from its start (inclusive).
    float run = 0.f;
    for (std::int64_t t = 0; t < n; ++t) {
      const std::int64_t th = x.token(p0 + t) * H + x.h, gt = x.gate_token(p0 + t);
      const float a = x.scalar_gate(gt);
      run += a;
      bc[I(t)] = run;
      float* q = qs.data() + t * R;
      float* k = ks.data() + t * R;
      Q.row(th * R, R, q);
      Kx.row(th * R, R, k);
      if (kvs != 1.f)
        for (std::int64_t r = 0; r < R; ++r) k[r] *= kvs;
      if (rg) {
        float* b = B.data() + t * R;
        if (gt >= 0) RG.row((gt * H + x.h) * R, R, b);
        else std::fill(b, b + R, 0.f);
        const float* prev = t ? B.data() + (t - 1) * R : nullptr;
        for (std::int64_t r = 0; r < R; ++r) b[r] += a + (prev ? prev[r] : 0.f);
      }
      Vx.row(th * C + x.c0, bv, vs.data() + t * bv);
      if (cg) {
        float* c = Cg.data() + t * bv;
        if (gt >= 0) CG.row((gt * H + x.h) * C + x.c0, bv, c);
        else std::fill(c, c + bv, 0.f);
        if (t)
          for (std::int64_t j = 0; j < bv; ++j) c[j] += Cg[I((t - 1) * bv + j)];
      }
    }
    // Scores with relative decays, s <= t.
    std::fill(A.begin(), A.end(), 0.f);
    for (std::int64_t t = 0; t < n; ++t)
      for (std::int64_t s = 0; s <= t; ++s) {
        const float* qt = qs.data() + t * R;
        const float* kt = ks.data() + s * R;
        float acc = 0.f;
        // 16 partial sums: the loop vectorises without reassociation.
        float lanes[16] = {};
        std::int64_t r = 0;
        if (rg) {
          const float* bt = B.data() + t * R;
          const float* bs = B.data() + s * R;
          v8 sum = {};
          for (; r + 8 <= R; r += 8) {
            v8 d = *reinterpret_cast<const v8*>(bt + r) - *reinterpret_cast<const v8*>(bs + r);
            fexp8(d);
            sum += *reinterpret_cast<const v8*>(qt + r) * *reinterpret_cast<const v8*>(kt + r) * d;
          }
          for (; r < R; ++r) acc += qt[r] * kt[r] * fexp(bt[r] - bs[r]);
          for (int l = 0; l < 8; ++l) acc += sum[l];
        } else {
          for (; r + 16 <= R; r += 16)
            for (int l = 0; l < 16; ++l) lanes[l] += qt[r + l] * kt[r + l];
          for (; r < R; ++r) acc += qt[r] * kt[r];
          for (float l : lanes) acc += l;
          acc *= fexp(bc[I(t)] - bc[I(s)]);
        }
        A[I(t * CH + s)] = acc;
      }
    // Outputs: the state's part (queries decayed from the chunk start), a [n, R] x [R, bv]
    // product that reads each state row once per chunk, then the chunk's part.
    // (Branches outside the loops over channels, so that those vectorise.)
    for (std::int64_t t = 0; t < n; ++t) {
      float* q = qs.data() + t * R;
      if (rg) {
        const float* b = B.data() + t * R;
        for (std::int64_t r = 0; r < R; ++r) q[r] *= fexp(b[r]);
      } else {
        const float d = fexp(bc[I(t)]);
        for (std::int64_t r = 0; r < R; ++r) q[r] *= d;
      }
    }
    mm(n, bv, R, qs.data(), R, 1, S.data(), bv, Ob.data(), bv, false);
    if (!cg) mm(n, bv, n, A.data(), CH, 1, vs.data(), bv, Ob.data(), bv, true);
    for (std::int64_t t = 0; t < n; ++t) {
      float* o = Ob.data() + t * bv;
      if (cg) {
        const float* ct = Cg.data() + t * bv;
        for (std::int64_t c = 0; c < bv; ++c) o[c] *= fexp(ct[c]);
        for (std::int64_t s = 0; s <= t; ++s) {
          const float w = A[I(t * CH + s)];
          const float* vr = vs.data() + s * bv;
          const float* cs = Cg.data() + s * bv;
          std::int64_t c = 0;
          for (; c + 8 <= bv; c += 8) {
            v8 d = *reinterpret_cast<const v8*>(ct + c) - *reinterpret_cast<const v8*>(cs + c);
            fexp8(d);
            *reinterpret_cast<v8*>(o + c) += w * *reinterpret_cast<const v8*>(vr + c) * d;
          }
          for (; c < bv; ++c) o[c] += w * vr[c] * fexp(ct[c] - cs[c]);
        }
      }
      const std::int64_t th = x.token(p0 + t) * H + x.h;
      for (std::int64_t c = 0; c < bv; ++c) O.set(th * C + x.c0 + c, os * o[c]);
    }
    // State update: decay to the chunk's end, plus keys and values decayed to the end.
    const std::int64_t last = n - 1;
    for (std::int64_t s = 0; s < n; ++s) {
      float* k = ks.data() + s * R;
      if (rg) {
        const float *bl = B.data() + last * R, *b = B.data() + s * R;
        for (std::int64_t r = 0; r < R; ++r) k[r] *= fexp(bl[r] - b[r]);
      } else {
        const float d = fexp(bc[I(last)] - bc[I(s)]);
        for (std::int64_t r = 0; r < R; ++r) k[r] *= d;
      }
      if (cg) {
        float* v = vs.data() + s * bv;
        const float *cl = Cg.data() + last * bv, *c = Cg.data() + s * bv;
        for (std::int64_t j = 0; j < bv; ++j) v[j] *= fexp(cl[j] - c[j]);
      }
    }
    for (std::int64_t c = 0; c < bv; ++c) cd[I(c)] = cg ? fexp(Cg[I(last * bv + c)]) : 1.f;
    for (std::int64_t r = 0; r < R; ++r) {
      float* srow = S.data() + r * bv;
      const float dr = rg ? fexp(B[I(last * R + r)]) : fexp(bc[I(last)]);
      for (std::int64_t c = 0; c < bv; ++c) srow[c] *= dr * cd[I(c)];
    }
    mm(R, bv, n, ks.data(), 1, R, vs.data(), bv, S.data(), bv, true);
  }
  store_state(x, S.data());
}

void token_default(const Ctx& x) { token_task(x); }
void chunk_default(const Ctx& x, std::int64_t CH) { chunk_task(x, CH); }
#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void token_avx2(const Ctx& x) { token_task(x); }
__attribute__((target("avx2,fma"))) void chunk_avx2(const Ctx& x, std::int64_t CH) { chunk_task(x, CH); }
#endif

bool has_avx2() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

// Gate pass for sequence n, head h (see plan.hpp).
void gate_task(const Bind& b, std::int64_t n, std::int64_t h, const Array* outs) {
  const Problem& p = *b.p;
  const std::int64_t K = p.K, V = p.V, H = p.heads, L = b.seqs.len[I(n)], start = b.seqs.start[I(n)];
  const Array &q = b[Slot::q], &k = b[Slot::k], &v = b[Slot::v], &dout = b[Slot::dout];
  const Array &dq = b[Slot::dq32], &dk = b[Slot::dk32], &dv = b[Slot::dv32], &o = b[Slot::o32];
  const Array &dqo = outs[0], &dko = outs[1], &dvo = outs[2], &dgo = outs[3], &dgko = outs[4], &dgvo = outs[5], &dh0o = outs[6];
  auto token = [&](std::int64_t pos) { return start + (p.reverse ? L - 1 - pos : pos); };
  for (std::int64_t pos = 0; pos < L; ++pos) {
    const std::int64_t t = token(pos) * H + h;
    for (std::int64_t i = 0; i < K; ++i) {
      dqo.set(t * K + i, dq[t * K + i]);
      dko.set(t * K + i, dk[t * K + i]);
    }
    for (std::int64_t j = 0; j < V; ++j) dvo.set(t * V + j, dv[t * V + j]);
  }
  // The final state's term.
  std::vector<float> fk(I(K), 0.f), fv(I(V), 0.f);
  float f = 0.f;
  const std::int64_t s0 = (n * H + h) * K * V;
  if (p.has_ht) {
    const Array &dht = b[Slot::ht], &st = b[Slot::st32];  // S_T in [K, V]
    for (std::int64_t i = 0; i < K; ++i)
      for (std::int64_t j = 0; j < V; ++j) {
        const float x = dht[s0 + i * V + j] * st[s0 + i * V + j];
        fk[I(i)] += x;
        fv[I(j)] += x;
        f += x;
      }
  }
  // Reverse-cumulative sums, from the last processed token.
  std::vector<float> rk = fk, rv = fv;
  float rs = f;
  for (std::int64_t pos = L - 1; pos >= 0; --pos) {
    const std::int64_t t = token(pos) * H + h;
    float row = 0.f;
    for (std::int64_t i = 0; i < K; ++i) {
      const float x = q[t * K + i] * dq[t * K + i] - k[t * K + i] * dk[t * K + i];
      row += x;
      rk[I(i)] += x;
      if (p.has_gk) dgko.set(t * K + i, rk[I(i)]);
    }
    rs += row;
    if (p.has_g) dgo.set(t, rs);
    if (p.has_gv)
      for (std::int64_t j = 0; j < V; ++j) {
        rv[I(j)] += o[t * V + j] * dout[t * V + j] - v[t * V + j] * dv[t * V + j];
        dgvo.set(t * V + j, rv[I(j)]);
      }
  }
  if (p.has_h0) {
    const Array& ds0 = b[Slot::ds032];
    const std::int64_t first = L > 0 ? token(0) : -1;
    for (std::int64_t i = 0; i < K; ++i)
      for (std::int64_t j = 0; j < V; ++j) {
        float lg = 0.f;
        if (first >= 0) {
          const std::int64_t t = first * H + h;
          if (p.has_g) lg += b.g[t];
          if (p.has_gamma) lg += b.gamma[h];
          if (p.has_gk) lg += b[Slot::gk][t * K + i];
          if (p.has_gv) lg += b[Slot::gv][t * V + j];
        }
        dh0o.set(s0 + i * V + j, ds0[s0 + i * V + j] * fexp(lg));
      }
  }
}

void* data(const Tensor& t) { return ejk::cpu::cpu_buffer(t.buffer()).data(); }

std::vector<std::int64_t> read_i32(const Tensor& t) {
  const auto* v = ejk::cpu::cpu_buffer(t.buffer()).as<std::int32_t>();
  return std::vector<std::int64_t>(v, v + t.numel());
}

class CpuLinearAttention final : public Implementation {
 public:
  CpuLinearAttention(Variant v, bool backward) : variant_(v), backward_(backward) {}
  std::string_view kernel() const override { return kernel_name(variant_, backward_); }
  Backend backend() const override { return Backend::cpu; }
  std::vector<ArgDef> args() const override { return kernel_args(variant_, backward_); }

  bool chunked() const { return variant_ != Variant::recurrent; }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    ParamSpace s;
    s.param("block_v", {16, 32, 64, 128, 256})
        // A slice wider than the widest value dimension only repeats the one below.
        .constraint("block_v == 16 || block_v / 2 < max_dim");
    if (chunked()) s.param("chunk", {16, 32, 64}).constraint("chunk == 16 || chunk / 2 < seq");
    s.bind(LinearAttentionKernel(variant_, backward_).vars(inv)).bind(device_vars(dev));
    return s;
  }

  // Slices for enough tasks to feed every core; chunk 16: per token the state's products cost
  // the same at any chunk, while the scores' relative decays (one exp per term with gk) grow
  // with it.
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    const Problem p = Problem::of(inv);
    const ParamSpace s = space(inv, dev);
    const std::int64_t want = 2 * std::max<std::int64_t>(1, dev.compute_units);
    std::int64_t bv = 256;
    while (bv > 16 && (bv / 2 >= std::max(p.K, p.V) || p.num_seqs * p.heads * ((p.V + bv - 1) / bv) < want)) bv /= 2;
    Config c{{"block_v", bv}};
    if (chunked()) c.set("chunk", std::int64_t{16});
    if (s.admits(c)) return c;
    auto all = s.enumerate();
    if (all.empty()) throw InvalidArgument(std::string(kernel()) + " cpu: empty parameter space for " + inv.signature());
    return all.front();
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    auto& pool = ejk::cpu::cpu_device(device).pool();
    const std::int64_t block_v = config.get("block_v");
    const std::int64_t chunk = chunked() ? config.get("chunk") : 1;
    if (block_v <= 0 || chunk <= 0)
      throw InvalidArgument(std::string(kernel()) + " cpu: config " + config.canonical() + " needs positive sizes");
    // The full argument list, lightning's gates absent.
    std::vector<const Tensor*> full(p.backward ? bwd::count : fwd::count, nullptr);
    for (std::size_t i = 0; i < args.size(); ++i) full[p.full_index(i)] = &args[i];
    auto arr = [&](std::size_t i) {
      const Tensor* t = full[i];
      return t && !is_absent(t->spec()) ? Array{data(*t), t->dtype()} : Array{};
    };
    Bind b;
    b.p = &p;
    b.seqs = sequences(p, p.varlen ? read_i32(*full[fwd::cu_seqlens]) : std::vector<std::int64_t>{});
    b.g = arr(fwd::g);
    if (p.variant == Variant::lightning) {
      for (double x : p.gamma({})) b.gamma_values.push_back(static_cast<float>(x));
      b.gamma = {b.gamma_values.data(), DType::f32};
    } else {
      b.gamma = arr(fwd::g_gamma);
    }
    b[Slot::q] = arr(fwd::q);
    b[Slot::k] = arr(fwd::k);
    b[Slot::v] = arr(fwd::v);
    b[Slot::gk] = arr(fwd::gk);
    b[Slot::gv] = arr(fwd::gv);
    b[Slot::h0] = arr(fwd::initial_state);
    std::vector<std::vector<float>> scratch;
    auto f32 = [&](Slot s, std::int64_t n) {
      scratch.emplace_back(I(n), 0.f);
      b[s] = {scratch.back().data(), DType::f32};
    };
    Array outs[7];
    const std::int64_t TH = p.tokens() * p.heads, states = p.num_seqs * p.heads * p.K * p.V;
    scratch.reserve(6);
    if (!p.backward) {
      b[Slot::o] = arr(fwd::o);
      b[Slot::final_state] = arr(fwd::final_state);
    } else {
      b[Slot::dout] = arr(bwd::dout);
      b[Slot::ht] = arr(bwd::dht);
      f32(Slot::dq32, TH * p.K);
      f32(Slot::dk32, TH * p.K);
      f32(Slot::dv32, TH * p.V);
      if (p.has_gv) f32(Slot::o32, TH * p.V);
      if (p.has_ht) f32(Slot::st32, states);
      if (p.has_h0) f32(Slot::ds032, states);
      const std::size_t o[7] = {bwd::dq, bwd::dk, bwd::dv, bwd::dg, bwd::dgk, bwd::dgv, bwd::dh0};
      for (int i = 0; i < 7; ++i) outs[i] = arr(o[i]);
    }
#if defined(__x86_64__)
    const bool avx2 = has_avx2();
    void (*const token_fn)(const Ctx&) = avx2 ? token_avx2 : token_default;
    void (*const chunk_fn)(const Ctx&, std::int64_t) = avx2 ? chunk_avx2 : chunk_default;
#else
    void (*const token_fn)(const Ctx&) = token_default;
    void (*const chunk_fn)(const Ctx&, std::int64_t) = chunk_default;
#endif
    for (const Pass& ps : plan(p)) {
      const std::int64_t bv = std::min(block_v, ps.C), slices = (ps.C + bv - 1) / bv;
      pool.parallel_for(p.num_seqs * p.heads * slices, [&](std::int64_t task) {
        const std::int64_t sl = task % slices, h = task / slices % p.heads, n = task / (slices * p.heads);
        const std::int64_t c0 = sl * bv;
        const Ctx x{b, ps, n, h, c0, std::min(bv, ps.C - c0), b.seqs.len[I(n)], b.seqs.start[I(n)]};
        if (chunked()) chunk_fn(x, chunk);
        else token_fn(x);
      });
    }
    if (p.backward)
      pool.parallel_for(p.num_seqs * p.heads, [&](std::int64_t task) { gate_task(b, task / p.heads, task % p.heads, outs); });
  }

 private:
  Variant variant_;
  bool backward_;
};

}  // namespace

EJK_BUILTIN(implementations, "linear_attention/cpu") {
  for (Variant v : variants)
    for (bool backward : {false, true}) r.add(std::make_shared<CpuLinearAttention>(v, backward));
}

}  // namespace ejk::kernels::linear_attention
