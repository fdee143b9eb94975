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
#include "ejk/error.hpp"
#include "linear_attention/impls.hpp"
#include "linear_attention/linear_attention.hpp"
#include "linear_attention/plan.hpp"

namespace ejk::kernels::linear_attention {
namespace {

std::size_t I(std::int64_t i) { return static_cast<std::size_t>(i); }

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

void token_task(const Ctx& x) {
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
      rd[I(r)] = std::exp(a + (RG && gt >= 0 ? RG[(gt * H + x.h) * R + r] : 0.f));
    }
    for (std::int64_t c = 0; c < bv; ++c) {
      v[I(c)] = Vx[th * C + x.c0 + c];
      cd[I(c)] = CG && gt >= 0 ? std::exp(CG[(gt * H + x.h) * C + x.c0 + c]) : 1.f;
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

void chunk_task(const Ctx& x, std::int64_t CH) {
  const Pass& ps = x.ps;
  const Problem& p = *x.b.p;
  const std::int64_t R = ps.R, C = ps.C, H = p.heads, bv = x.bv;
  const Array &Q = x.b[ps.query], &Kx = x.b[ps.key], &Vx = x.b[ps.value], &O = x.b[ps.out];
  const Array &RG = x.b[ps.row_gate], &CG = x.b[ps.col_gate];
  const bool rg = static_cast<bool>(RG), cg = static_cast<bool>(CG);
  std::vector<float> S(I(R * bv)), qs(I(CH * R)), ks(I(CH * R)), B(rg ? I(CH * R) : 0), bc(I(CH)), vs(I(CH * bv)),
      Cg(cg ? I(CH * bv) : 0), A(I(CH * CH)), o(I(bv)), row(I(R));
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
      for (std::int64_t r = 0; r < R; ++r) {
        qs[I(t * R + r)] = Q[th * R + r];
        ks[I(t * R + r)] = kvs * Kx[th * R + r];
        if (rg) B[I(t * R + r)] = (t ? B[I((t - 1) * R + r)] : 0.f) + a + (gt >= 0 ? RG[(gt * H + x.h) * R + r] : 0.f);
      }
      for (std::int64_t c = 0; c < bv; ++c) {
        vs[I(t * bv + c)] = Vx[th * C + x.c0 + c];
        if (cg) Cg[I(t * bv + c)] = (t ? Cg[I((t - 1) * bv + c)] : 0.f) + (gt >= 0 ? CG[(gt * H + x.h) * C + x.c0 + c] : 0.f);
      }
    }
    // Scores with relative decays, s <= t.
    for (std::int64_t t = 0; t < n; ++t)
      for (std::int64_t s = 0; s <= t; ++s) {
        const float* qt = qs.data() + t * R;
        const float* kt = ks.data() + s * R;
        float acc = 0.f;
        if (rg) {
          const float* bt = B.data() + t * R;
          const float* bs = B.data() + s * R;
          for (std::int64_t r = 0; r < R; ++r) acc += qt[r] * kt[r] * std::exp(bt[r] - bs[r]);
        } else {
          for (std::int64_t r = 0; r < R; ++r) acc += qt[r] * kt[r];
          acc *= std::exp(bc[I(t)] - bc[I(s)]);
        }
        A[I(t * CH + s)] = acc;
      }
    // Outputs: the state's part (queries decayed from the chunk start) and the chunk's part.
    for (std::int64_t t = 0; t < n; ++t) {
      const std::int64_t th = x.token(p0 + t) * H + x.h;
      for (std::int64_t r = 0; r < R; ++r)
        row[I(r)] = qs[I(t * R + r)] * (rg ? std::exp(B[I(t * R + r)]) : std::exp(bc[I(t)]));
      std::fill(o.begin(), o.end(), 0.f);
      for (std::int64_t r = 0; r < R; ++r) {
        const float w = row[I(r)];
        const float* s = S.data() + r * bv;
        for (std::int64_t c = 0; c < bv; ++c) o[I(c)] += w * s[c];
      }
      if (cg)
        for (std::int64_t c = 0; c < bv; ++c) o[I(c)] *= std::exp(Cg[I(t * bv + c)]);
      for (std::int64_t s = 0; s <= t; ++s) {
        const float w = A[I(t * CH + s)];
        const float* vr = vs.data() + s * bv;
        if (cg) {
          const float* ct = Cg.data() + t * bv;
          const float* cs = Cg.data() + s * bv;
          for (std::int64_t c = 0; c < bv; ++c) o[I(c)] += w * vr[c] * std::exp(ct[c] - cs[c]);
        } else {
          for (std::int64_t c = 0; c < bv; ++c) o[I(c)] += w * vr[c];
        }
      }
      for (std::int64_t c = 0; c < bv; ++c) O.set(th * C + x.c0 + c, os * o[I(c)]);
    }
    // State update: decay to the chunk's end, plus keys and values decayed to the end.
    const std::int64_t last = n - 1;
    for (std::int64_t s = 0; s < n; ++s) {
      for (std::int64_t r = 0; r < R; ++r)
        ks[I(s * R + r)] *= rg ? std::exp(B[I(last * R + r)] - B[I(s * R + r)]) : std::exp(bc[I(last)] - bc[I(s)]);
      if (cg)
        for (std::int64_t c = 0; c < bv; ++c) vs[I(s * bv + c)] *= std::exp(Cg[I(last * bv + c)] - Cg[I(s * bv + c)]);
    }
    for (std::int64_t r = 0; r < R; ++r) {
      float* srow = S.data() + r * bv;
      const float dr = rg ? std::exp(B[I(last * R + r)]) : std::exp(bc[I(last)]);
      for (std::int64_t c = 0; c < bv; ++c) srow[c] *= dr * (cg ? std::exp(Cg[I(last * bv + c)]) : 1.f);
      for (std::int64_t s = 0; s < n; ++s) {
        const float kr = ks[I(s * R + r)];
        const float* vr = vs.data() + s * bv;
        for (std::int64_t c = 0; c < bv; ++c) srow[c] += kr * vr[c];
      }
    }
  }
  store_state(x, S.data());
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
        dh0o.set(s0 + i * V + j, ds0[s0 + i * V + j] * std::exp(lg));
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

  // Slices for enough tasks to feed every core, chunk 32 (scores vs state passes balanced at
  // the usual head widths).
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    const Problem p = Problem::of(inv);
    const ParamSpace s = space(inv, dev);
    const std::int64_t want = 2 * std::max<std::int64_t>(1, dev.compute_units);
    std::int64_t bv = 256;
    while (bv > 16 && (bv / 2 >= std::max(p.K, p.V) || p.num_seqs * p.heads * ((p.V + bv - 1) / bv) < want)) bv /= 2;
    Config c{{"block_v", bv}};
    if (chunked()) c.set("chunk", std::int64_t{32});
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
    for (const Pass& ps : plan(p)) {
      const std::int64_t bv = std::min(block_v, ps.C), slices = (ps.C + bv - 1) / bv;
      pool.parallel_for(p.num_seqs * p.heads * slices, [&](std::int64_t task) {
        const std::int64_t sl = task % slices, h = task / slices % p.heads, n = task / (slices * p.heads);
        const std::int64_t c0 = sl * bv;
        const Ctx x{b, ps, n, h, c0, std::min(bv, ps.C - c0), b.seqs.len[I(n)], b.seqs.start[I(n)]};
        if (chunked()) chunk_task(x, chunk);
        else token_task(x);
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

std::shared_ptr<const Implementation> cpu_implementation(Variant v, bool backward) {
  return std::make_shared<CpuLinearAttention>(v, backward);
}

}  // namespace ejk::kernels::linear_attention
