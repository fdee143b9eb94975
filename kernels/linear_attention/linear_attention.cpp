#include "linear_attention/linear_attention.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "common/builtin.hpp"
#include "common/sampled.hpp"
#include "ejk/error.hpp"

namespace ejk::kernels::linear_attention {

namespace {

const char* const fwd_names[fwd::count] = {"q",  "k",  "v",  "g", "g_gamma", "gk", "gv", "initial_state", "cu_seqlens",
                                           "o", "final_state"};
const char* const bwd_names[bwd::count] = {"q",  "k",  "v",  "g",  "g_gamma", "gk",  "gv",  "initial_state", "cu_seqlens",
                                           "do", "dht", "dq", "dk", "dv",      "dg",  "dgk", "dgv", "dh0"};
// Lightning's lists as positions of the full lists.
const std::size_t lightning_fwd[] = {fwd::q, fwd::k, fwd::v, fwd::initial_state, fwd::cu_seqlens, fwd::o, fwd::final_state};
const std::size_t lightning_bwd[] = {bwd::q,    bwd::k,   bwd::v,  bwd::initial_state, bwd::cu_seqlens, bwd::dout,
                                     bwd::dht,  bwd::dq,  bwd::dk, bwd::dv,            bwd::dh0};

std::size_t full_count(bool backward) { return backward ? bwd::count : fwd::count; }
const char* full_name(bool backward, std::size_t i) {
  if (backward) return i < bwd::count ? bwd_names[i] : "?";
  return i < fwd::count ? fwd_names[i] : "?";
}
bool is_output(bool backward, std::size_t i) { return backward ? i >= bwd::dq : i >= fwd::o; }

std::span<const std::size_t> lightning_list(bool backward) {
  if (backward) return lightning_bwd;
  return lightning_fwd;
}

std::string describe(const char* name, const TensorSpec& s) {
  return std::string(name) + " " + to_string(s.shape) + " " + std::string(to_string(s.dtype));
}

Variant variant_of(std::string_view name, bool& backward) {
  backward = name.ends_with("_bwd");
  const std::string_view base = backward ? name.substr(0, name.size() - 4) : name;
  if (base == "recurrent") return Variant::recurrent;
  if (base == "gla") return Variant::gla;
  if (base == "lightning_attention") return Variant::lightning;
  throw InvalidArgument("linear attention: unknown kernel '" + std::string(name) + "'");
}

std::size_t I(std::int64_t i) { return static_cast<std::size_t>(i); }

// ALiBi's slopes (as MiniMax's _build_slope_tensor): geometric from 2^(-8/n) for a power of two
// n; otherwise those of the power of two below, then every other slope of twice that.
std::vector<double> alibi_slopes(std::int64_t n) {
  auto pow2 = [](std::int64_t m) {
    std::vector<double> s;
    const double start = std::pow(2.0, -std::pow(2.0, -(std::log2(static_cast<double>(m)) - 3.0)));
    for (std::int64_t i = 0; i < m; ++i) s.push_back(start * std::pow(start, static_cast<double>(i)));
    return s;
  };
  const double l = std::log2(static_cast<double>(n));
  if (l == std::floor(l)) return pow2(n);
  const std::int64_t c = std::int64_t{1} << static_cast<int>(std::floor(l));
  std::vector<double> s = pow2(c);
  const std::vector<double> twice = alibi_slopes(2 * c);
  for (std::size_t i = 0; static_cast<std::int64_t>(s.size()) < n; i += 2) s.push_back(twice[i]);
  return s;
}

}  // namespace

std::string_view kernel_name(Variant v, bool backward) {
  switch (v) {
    case Variant::recurrent: return backward ? "recurrent_bwd" : "recurrent";
    case Variant::gla: return backward ? "gla_bwd" : "gla";
    default: return backward ? "lightning_attention_bwd" : "lightning_attention";
  }
}

std::vector<ArgDef> kernel_args(Variant v, bool backward) {
  std::vector<ArgDef> a;
  if (v == Variant::lightning) {
    for (std::size_t i : lightning_list(backward))
      a.push_back({full_name(backward, i), is_output(backward, i) ? Role::out : Role::in});
  } else {
    for (std::size_t i = 0; i < full_count(backward); ++i)
      a.push_back({full_name(backward, i), is_output(backward, i) ? Role::out : Role::in});
  }
  return a;
}

TensorSpec absent() { return {Shape{0}, DType::f32}; }

std::vector<double> lightning_gamma(std::int64_t heads, std::int64_t layer_idx, std::int64_t num_layers,
                                    const std::string& slopes) {
  std::vector<double> g(I(heads));
  if (slopes == "alibi") {
    const auto s = alibi_slopes(heads);
    const double depth = num_layers > 1 ? static_cast<double>(layer_idx) / static_cast<double>(num_layers - 1) : 0.0;
    for (std::int64_t h = 0; h < heads; ++h) g[I(h)] = -s[I(h)] * (1.0 - depth + 1e-5);
  } else {
    const double f = -(8.0 / static_cast<double>(heads)) * (1.0 - static_cast<double>(layer_idx) / static_cast<double>(num_layers));
    for (std::int64_t h = 0; h < heads; ++h) g[I(h)] = f * static_cast<double>(h);
  }
  return g;
}

std::size_t Problem::full_index(std::size_t i) const {
  return variant == Variant::lightning ? lightning_list(backward)[i] : i;
}

std::vector<double> Problem::gamma(const HostArrays& args) const {
  if (variant == Variant::lightning) {
    auto g = lightning_gamma(heads, layer_idx, num_layers, slopes);
    for (auto& x : g) x = round_to(dtype, x);  // applied as the dtype holds it, like a g_gamma array
    return g;
  }
  if (!has_gamma) return {};
  return args[fwd::g_gamma];
}

Problem Problem::of(const Invocation& inv) {
  Problem p;
  p.variant = variant_of(inv.kernel, p.backward);
  const std::string kname(kernel_name(p.variant, p.backward));
  const auto list = kernel_args(p.variant, p.backward);
  if (inv.args.size() != list.size()) {
    std::string names;
    for (std::size_t i = 0; i < list.size(); ++i) names += (i ? ", " : "") + list[i].name;
    throw InvalidArgument(kname + " takes " + std::to_string(list.size()) + " arguments (" + names + "), got " +
                          std::to_string(inv.args.size()));
  }
  // Every check below reads the full list; lightning's missing gates are absent.
  std::vector<TensorSpec> a(full_count(p.backward), absent());
  for (std::size_t i = 0; i < list.size(); ++i) a[p.full_index(i)] = inv.args[i];
  auto name = [&](std::size_t i) { return full_name(p.backward, i); };

  for (const auto& [key, val] : inv.options.items()) {
    if (key != "reverse") throw InvalidArgument(kname + " has no option '" + key + "' (options: reverse)");
    if (!val.is_boolean()) throw InvalidArgument(kname + " option 'reverse' must be a boolean, got " + val.dump());
    p.reverse = val.get<bool>();
  }
  const bool light = p.variant == Variant::lightning;
  const std::string scalar_list = light ? "scale, layer_idx, num_layers, slopes" : "scale";
  bool have_layers = false;
  for (const auto& [key, val] : inv.scalars.items()) {
    if (key == "scale") {
      if (!val.is_number() || !std::isfinite(val.get<double>()) || val.get<double>() == 0.0)
        throw InvalidArgument(kname + " scalar 'scale' must be a finite non-zero number, got " + val.dump());
      p.scale = val.get<double>();
    } else if (light && (key == "layer_idx" || key == "num_layers")) {
      if (!val.is_number_integer()) throw InvalidArgument(kname + " scalar '" + key + "' must be an integer, got " + val.dump());
      (key == "layer_idx" ? p.layer_idx : p.num_layers) = val.get<std::int64_t>();
      have_layers = have_layers || key == "num_layers";
    } else if (light && key == "slopes") {
      if (!val.is_string() || (val.get<std::string>() != "linear" && val.get<std::string>() != "alibi"))
        throw InvalidArgument(kname + " scalar 'slopes' must be \"linear\" or \"alibi\", got " + val.dump());
      p.slopes = val.get<std::string>();
    } else {
      throw InvalidArgument(kname + " has no scalar '" + key + "' (scalars: " + scalar_list + ")");
    }
  }
  if (light && (p.num_layers < 1 || p.layer_idx < 0 || p.layer_idx >= p.num_layers))
    throw InvalidArgument(kname + ": layer_idx " + std::to_string(p.layer_idx) + " must lie in [0, num_layers " +
                          std::to_string(p.num_layers) + ")");
  (void)have_layers;

  const TensorSpec& q = a[fwd::q];
  if (q.shape.size() != 4)
    throw InvalidArgument(kname + ": " + describe("q", q) + " must be [batch, seq, heads, K]");
  p.dtype = q.dtype;
  if (p.dtype != DType::f32 && p.dtype != DType::f16 && p.dtype != DType::bf16)
    throw InvalidArgument(kname + ": " + describe("q", q) + " must be f32, f16 or bf16");
  p.batch = q.shape[0];
  p.seq = q.shape[1];
  p.heads = q.shape[2];
  p.K = q.shape[3];
  const TensorSpec& v = a[fwd::v];
  if (v.shape.size() != 4)
    throw InvalidArgument(kname + ": " + describe("v", v) + " must be [batch, seq, heads, V]");
  p.V = v.shape[3];
  if (p.batch < 0 || p.seq < 0 || p.heads <= 0 || p.K <= 0 || p.V <= 0)
    throw InvalidArgument(kname + ": " + describe("q", q) + " and " + describe("v", v) +
                          " need heads, K and V of at least 1");
  if (p.K > 256 || p.V > 256)
    throw InvalidArgument(kname + ": K " + std::to_string(p.K) + " and V " + std::to_string(p.V) +
                          " (q " + to_string(q.shape) + ", v " + to_string(v.shape) + ") must be at most 256");

  auto expect = [&](std::size_t i, const Shape& want, DType t, const char* layout) {
    if (a[i].shape != want || a[i].dtype != t)
      throw InvalidArgument(kname + ": " + describe(name(i), a[i]) + " must be " + std::string(to_string(t)) + " " +
                            to_string(want) + " (" + layout + ")");
  };
  auto optional = [&](std::size_t i, const Shape& want, const char* layout) {
    if (is_absent(a[i])) return false;
    expect(i, want, p.dtype, layout);
    return true;
  };
  const Shape qs{p.batch, p.seq, p.heads, p.K}, vs{p.batch, p.seq, p.heads, p.V};
  expect(fwd::k, qs, p.dtype, "[batch, seq, heads, K], like q");
  expect(fwd::v, vs, p.dtype, "[batch, seq, heads, V] with batch, seq, heads of q");
  p.has_g = optional(fwd::g, {p.batch, p.seq, p.heads}, "[batch, seq, heads]");
  p.has_gamma = optional(fwd::g_gamma, {p.heads}, "[heads]");
  p.has_gk = optional(fwd::gk, qs, "[batch, seq, heads, K]");
  p.has_gv = optional(fwd::gv, vs, "[batch, seq, heads, V]");
  if (light) p.has_gamma = true;

  const TensorSpec& cu = a[fwd::cu_seqlens];
  p.varlen = !is_absent(cu);
  p.num_seqs = p.batch;
  if (p.varlen) {
    if (cu.shape.size() != 1 || cu.dtype != DType::i32 || cu.shape[0] < 2)
      throw InvalidArgument(kname + ": " + describe("cu_seqlens", cu) + " must be i32 [num_seqs + 1] with num_seqs >= 1");
    if (p.batch != 1)
      throw InvalidArgument(kname + ": with cu_seqlens " + to_string(cu.shape) + " q " + to_string(q.shape) +
                            " must have batch 1 (packed sequences)");
    p.num_seqs = cu.shape[0] - 1;
  }
  const Shape ss{p.num_seqs, p.heads, p.K, p.V};
  const char* state_layout = p.varlen ? "[num_seqs, heads, K, V]" : "[batch, heads, K, V]";
  p.has_h0 = optional(fwd::initial_state, ss, state_layout);
  if (!p.backward) {
    expect(fwd::o, vs, p.dtype, "[batch, seq, heads, V]");
    p.has_ht = optional(fwd::final_state, ss, state_layout);
  } else {
    expect(bwd::dout, vs, p.dtype, "[batch, seq, heads, V], like o");
    p.has_ht = optional(bwd::dht, ss, state_layout);
    expect(bwd::dq, qs, p.dtype, "like q");
    expect(bwd::dk, qs, p.dtype, "like k");
    expect(bwd::dv, vs, p.dtype, "like v");
    auto grad = [&](std::size_t i, std::size_t of, bool present, const Shape& want, const char* layout) {
      if (!present) {
        if (!is_absent(a[i]))
          throw InvalidArgument(kname + ": " + describe(name(i), a[i]) + " must be absent ([0]) since " + name(of) +
                                " is");
        return;
      }
      expect(i, want, p.dtype, layout);
    };
    grad(bwd::dg, bwd::g, p.has_g, {p.batch, p.seq, p.heads}, "like g");
    grad(bwd::dgk, bwd::gk, p.has_gk, qs, "like gk");
    grad(bwd::dgv, bwd::gv, p.has_gv, vs, "like gv");
    grad(bwd::dh0, bwd::initial_state, p.has_h0, ss, "like initial_state");
  }
  // Device kernels index with 32-bit integers.
  const double elems = static_cast<double>(p.tokens()) * static_cast<double>(p.heads) * static_cast<double>(std::max(p.K, p.V));
  const double states = static_cast<double>(p.num_seqs * p.heads) * static_cast<double>(p.K * p.V);
  if (elems >= 2147483647.0 || states >= 2147483647.0)
    throw InvalidArgument(kname + ": " + describe("q", q) + " holds 2^31 elements or more");
  if (p.scale == 0.0) p.scale = 1.0 / std::sqrt(static_cast<double>(p.K));
  return p;
}

Invocation make_invocation(Variant v, bool backward, std::span<const TensorSpec> args, bool reverse, double scale,
                           std::int64_t layer_idx, std::int64_t num_layers, const std::string& slopes) {
  Invocation inv;
  inv.kernel = std::string(kernel_name(v, backward));
  inv.args.assign(args.begin(), args.end());
  if (reverse) inv.options["reverse"] = true;
  if (scale != 0.0) inv.scalars["scale"] = scale;
  if (v == Variant::lightning) {
    inv.scalars["layer_idx"] = layer_idx;
    inv.scalars["num_layers"] = num_layers;
    if (slopes != "linear") inv.scalars["slopes"] = slopes;
  }
  return inv;
}

Sequences sequences(const Problem& p, std::span<const std::int64_t> cu) {
  Sequences s;
  if (!p.varlen) {
    for (std::int64_t b = 0; b < p.batch; ++b) {
      s.start.push_back(b * p.seq);
      s.len.push_back(p.seq);
    }
    return s;
  }
  const std::string kname(kernel_name(p.variant, p.backward));
  for (std::size_t n = 0; n + 1 < cu.size(); ++n)
    if (cu[n + 1] < cu[n])
      throw InvalidArgument(kname + ": cu_seqlens decreases at entry " + std::to_string(n + 1) + " (" +
                            std::to_string(cu[n]) + " then " + std::to_string(cu[n + 1]) + ")");
  if (static_cast<std::int64_t>(cu.size()) != p.num_seqs + 1 || cu.front() != 0 || cu.back() != p.seq)
    throw InvalidArgument(kname + ": cu_seqlens must run from 0 to the token count " + std::to_string(p.seq) + ", got " +
                          std::to_string(cu.empty() ? -1 : cu.front()) + " .. " + std::to_string(cu.empty() ? -1 : cu.back()));
  for (std::size_t n = 0; n + 1 < cu.size(); ++n) {
    s.start.push_back(cu[n]);
    s.len.push_back(cu[n + 1] - cu[n]);
  }
  return s;
}

namespace {

std::vector<std::int64_t> ints(const std::vector<double>& v) { return {v.begin(), v.end()}; }

// One (sequence, head)'s inputs, rows in token order (processing order is reversed when
// `reverse`): q, k, gk [L][K]; v, gv, dout [L][V]; g [L]; the states [K][V]. Absent arrays
// are empty.
struct PairIn {
  std::int64_t len = 0;
  std::vector<double> q, k, v, g, gk, gv, h0, dout, dht;
  double gamma = 0.0;

  // Reads sequence n (tokens [start, start + len)) and head h through `read`, which takes the
  // full (recurrent / gla) argument positions.
  PairIn(const Problem& p, const ArgReader& read, std::int64_t n, std::int64_t start, std::int64_t length, std::int64_t h,
         std::span<const double> gammas)
      : len(length) {
    const std::int64_t H = p.heads, K = p.K, V = p.V;
    auto rows = [&](std::size_t arg, std::int64_t width) { return row_slices(read, arg, start * H * width, H * width, len, h * width, width); };
    q = rows(fwd::q, K);
    k = rows(fwd::k, K);
    v = rows(fwd::v, V);
    if (p.has_g) g = rows(fwd::g, 1);
    if (p.has_gk) gk = rows(fwd::gk, K);
    if (p.has_gv) gv = rows(fwd::gv, V);
    if (!gammas.empty()) gamma = gammas[I(h)];
    const std::int64_t state = (n * H + h) * K * V;
    if (p.has_h0) h0 = read(fwd::initial_state, state, K * V);
    if (p.backward) {
      dout = rows(bwd::dout, V);
      if (p.has_ht) dht = read(bwd::dht, state, K * V);
    }
  }

  // The row of the token at processing position pos.
  std::int64_t row(const Problem& p, std::int64_t pos) const { return p.reverse ? len - 1 - pos : pos; }
  // Log-decay of row r at (i, j).
  double decay(const Problem& p, std::int64_t r, std::int64_t i, std::int64_t j) const {
    double x = 0.0;
    if (p.has_g) x += g[I(r)];
    x += gamma;
    if (p.has_gk) x += gk[I(r * p.K + i)];
    if (p.has_gv) x += gv[I(r * p.V + j)];
    return x;
  }
};

// What one (sequence, head) gives, rows in token order: o [L][V] and the final state
// (forward); dq, dk, dgk [L][K], dv, dgv [L][V], dg [L] and dh0 (backward).
struct PairOut {
  std::vector<double> o, fin, dq, dk, dv, dg, dgk, dgv, dh0;
};

// One step of the loop: the state after processing position pos (row r), from the one before.
void step(const Problem& p, const PairIn& x, std::int64_t r, const double* before, double* after) {
  const std::int64_t K = p.K, V = p.V;
  for (std::int64_t i = 0; i < K; ++i)
    for (std::int64_t j = 0; j < V; ++j)
      after[i * V + j] = std::exp(x.decay(p, r, i, j)) * before[i * V + j] + x.k[I(r * K + i)] * x.v[I(r * V + j)];
}

// The token loop of one (sequence, head).
PairOut pair_forward(const Problem& p, const PairIn& x) {
  const std::int64_t K = p.K, V = p.V;
  PairOut out;
  out.o.assign(I(x.len * V), 0.0);
  std::vector<double> S(I(K * V), 0.0), next(S.size());
  if (p.has_h0) S = x.h0;
  for (std::int64_t pos = 0; pos < x.len; ++pos) {
    const std::int64_t r = x.row(p, pos);
    step(p, x, r, S.data(), next.data());
    std::swap(S, next);
    for (std::int64_t j = 0; j < V; ++j) {
      double acc = 0.0;
      for (std::int64_t i = 0; i < K; ++i) acc += x.q[I(r * K + i)] * S[I(i * V + j)];
      out.o[I(r * V + j)] = p.scale * acc;
    }
  }
  out.fin = std::move(S);
  return out;
}

// Reverse-mode differentiation of the same loop. The states are kept at every C-th position
// (C about sqrt(L)) and each stretch's recomputed from there as the backward reaches it, the
// same arithmetic as the forward's, so host memory is O(sqrt(L) K V) rather than O(L K V).
PairOut pair_backward(const Problem& p, const PairIn& x) {
  const std::int64_t K = p.K, V = p.V, KV = K * V, L = x.len;
  PairOut out;
  out.dq.assign(I(L * K), 0.0);
  out.dk = out.dq;
  out.dv.assign(I(L * V), 0.0);
  if (p.has_g) out.dg.assign(I(L), 0.0);
  if (p.has_gk) out.dgk.assign(I(L * K), 0.0);
  if (p.has_gv) out.dgv.assign(I(L * V), 0.0);
  const auto C = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(std::sqrt(static_cast<double>(L)))));
  // marks[c] is the state before position c * C.
  std::vector<double> marks(I((L + C - 1) / C * KV), 0.0), S(I(KV), 0.0), next(I(KV));
  if (p.has_h0) S = x.h0;
  for (std::int64_t pos = 0; pos < L; ++pos) {
    if (pos % C == 0) std::copy(S.begin(), S.end(), marks.begin() + pos / C * KV);
    step(p, x, x.row(p, pos), S.data(), next.data());
    std::swap(S, next);
  }
  std::vector<double> dS(I(KV), 0.0), D(I(KV)), states(I((C + 1) * KV));
  if (p.has_ht) dS = x.dht;
  for (std::int64_t c0 = (L - 1) / C * C; c0 >= 0 && L > 0; c0 -= C) {
    // states[m] is the state before position c0 + m.
    const std::int64_t n = std::min(C, L - c0);
    std::copy_n(marks.begin() + c0 / C * KV, KV, states.begin());
    for (std::int64_t m = 0; m < n; ++m) step(p, x, x.row(p, c0 + m), states.data() + m * KV, states.data() + (m + 1) * KV);
    for (std::int64_t pos = c0 + n - 1; pos >= c0; --pos) {
      const std::int64_t r = x.row(p, pos);
      const double* Sn = states.data() + (pos - c0 + 1) * KV;
      const double* Sp = states.data() + (pos - c0) * KV;
      for (std::int64_t i = 0; i < K; ++i) {
        double acc = 0.0;
        for (std::int64_t j = 0; j < V; ++j) {
          dS[I(i * V + j)] += p.scale * x.q[I(r * K + i)] * x.dout[I(r * V + j)];
          acc += Sn[i * V + j] * x.dout[I(r * V + j)];
        }
        out.dq[I(r * K + i)] = p.scale * acc;
      }
      for (std::int64_t i = 0; i < K; ++i)
        for (std::int64_t j = 0; j < V; ++j) {
          const double ds = dS[I(i * V + j)];
          out.dk[I(r * K + i)] += ds * x.v[I(r * V + j)];
          out.dv[I(r * V + j)] += ds * x.k[I(r * K + i)];
          D[I(i * V + j)] = std::exp(x.decay(p, r, i, j));
          const double dlog = ds * D[I(i * V + j)] * Sp[i * V + j];  // d loss / d log D
          if (p.has_g) out.dg[I(r)] += dlog;
          if (p.has_gk) out.dgk[I(r * K + i)] += dlog;
          if (p.has_gv) out.dgv[I(r * V + j)] += dlog;
        }
      for (std::int64_t e = 0; e < KV; ++e) dS[I(e)] *= D[I(e)];
    }
  }
  if (p.has_h0) out.dh0 = std::move(dS);
  return out;
}

// The outputs a pair's rows land in: full argument position, the rows' width (tokens), or the
// state's (per pair), and the PairOut member.
struct Output {
  std::size_t arg;
  bool present, per_token;
  std::int64_t width;
  std::vector<double> PairOut::*values;
};

std::vector<Output> outputs(const Problem& p) {
  if (!p.backward) return {{fwd::o, true, true, p.V, &PairOut::o}, {fwd::final_state, p.has_ht, false, p.K * p.V, &PairOut::fin}};
  return {{bwd::dq, true, true, p.K, &PairOut::dq},          {bwd::dk, true, true, p.K, &PairOut::dk},
          {bwd::dv, true, true, p.V, &PairOut::dv},          {bwd::dg, p.has_g, true, 1, &PairOut::dg},
          {bwd::dgk, p.has_gk, true, p.K, &PairOut::dgk},    {bwd::dgv, p.has_gv, true, p.V, &PairOut::dgv},
          {bwd::dh0, p.has_h0, false, p.K * p.V, &PairOut::dh0}};
}

// The per-head constant log-decays, and the sequences: what every pair shares. `read` takes
// full argument positions.
std::vector<double> gammas(const Problem& p, const ArgReader& read) {
  HostArrays a(full_count(p.backward));
  if (p.variant != Variant::lightning && p.has_gamma) a[fwd::g_gamma] = read(fwd::g_gamma, 0, p.heads);
  return p.gamma(a);
}

Sequences read_sequences(const Problem& p, const ArgReader& read) {
  return sequences(p, p.varlen ? ints(read(fwd::cu_seqlens, 0, p.num_seqs + 1)) : std::vector<std::int64_t>{});
}

}  // namespace

std::string_view LinearAttentionKernel::host_version() const {
  switch (variant_) {
    case Variant::recurrent: return backward_ ? "recurrent_bwd/1" : "recurrent/1";
    case Variant::gla: return backward_ ? "gla_bwd/1" : "gla/1";
    default: return backward_ ? "lightning_attention_bwd/1" : "lightning_attention/1";
  }
}

void LinearAttentionKernel::check(const Invocation& inv) const { (void)Problem::of(inv); }

Vars LinearAttentionKernel::vars(const Invocation& inv) const {
  const Problem p = Problem::of(inv);
  return {{"batch", p.batch},
          {"seq", p.seq},
          {"heads", p.heads},
          {"key_dim", p.K},
          {"value_dim", p.V},
          {"max_dim", std::max(p.K, p.V)},
          {"num_seqs", p.num_seqs},
          {"dtype", std::string(to_string(p.dtype))},
          {"dtype_size", static_cast<std::int64_t>(dtype_size(p.dtype))}};
}

double LinearAttentionKernel::flops(const Invocation& inv) const {
  // The recurrence's 4 K V per token and head (state update and output) for every form, so
  // that rates compare like for like; the backward runs three such passes.
  const Problem p = Problem::of(inv);
  const double per = 4.0 * static_cast<double>(p.K * p.V) * static_cast<double>(p.tokens() * p.heads);
  return p.backward ? 3.0 * per : per;
}

double LinearAttentionKernel::bytes(const Invocation& inv) const {
  const Problem p = Problem::of(inv);
  const double e = static_cast<double>(dtype_size(p.dtype));
  const double th = static_cast<double>(p.tokens() * p.heads);
  double n = th * static_cast<double>(2 * p.K + 2 * p.V);  // q, k, v, o (or do)
  if (p.has_g) n += th;
  if (p.has_gk) n += th * static_cast<double>(p.K);
  if (p.has_gv) n += th * static_cast<double>(p.V);
  const double state = static_cast<double>(p.num_seqs * p.heads * p.K * p.V);
  n += state * ((p.has_h0 ? 1 : 0) + (p.has_ht ? 1 : 0));
  if (p.backward) n *= 2.0;  // gradients of everything read
  return e * n;
}

namespace {

// Every (sequence, head)'s loop; `full` in full argument positions. Returns this kernel's
// outputs in its list's order.
HostArrays loops(const Problem& p, const HostArrays& full, std::span<const double> gamma) {
  const ArgReader read = host_reader(full);
  const Sequences seqs = read_sequences(p, read);
  const std::vector<Output> outs = outputs(p);
  HostArrays result;
  for (const Output& o : outs) {
    const std::int64_t rows = o.per_token ? p.tokens() * p.heads : p.num_seqs * p.heads;
    result.emplace_back(o.present ? I(rows * o.width) : 0, 0.0);
  }
  for (std::int64_t n = 0; n < p.num_seqs; ++n)
    for (std::int64_t h = 0; h < p.heads; ++h) {
      const PairIn x(p, read, n, seqs.start[I(n)], seqs.len[I(n)], h, gamma);
      const PairOut y = p.backward ? pair_backward(p, x) : pair_forward(p, x);
      for (std::size_t a = 0; a < outs.size(); ++a) {
        const Output& o = outs[a];
        if (!o.present) continue;
        const std::vector<double>& v = y.*o.values;
        for (std::int64_t r = 0; r < (o.per_token ? x.len : 1); ++r) {
          const std::int64_t row = o.per_token ? (seqs.start[I(n)] + r) * p.heads + h : n * p.heads + h;
          std::copy_n(v.begin() + r * o.width, o.width, result[a].begin() + row * o.width);
        }
      }
    }
  HostArrays out;
  for (std::size_t a = 0; a < outs.size(); ++a)
    if (p.variant != Variant::lightning || !(outs[a].arg == bwd::dg || outs[a].arg == bwd::dgk || outs[a].arg == bwd::dgv))
      out.push_back(std::move(result[a]));
  return out;
}

}  // namespace

HostArrays reference_forward(const Problem& p, const HostArrays& full_args, std::span<const double> gamma) {
  return loops(p, full_args, gamma);
}

HostArrays reference_backward(const Problem& p, const HostArrays& full_args, std::span<const double> gamma) {
  return loops(p, full_args, gamma);
}

HostArrays LinearAttentionKernel::reference(const Invocation& inv, const HostArrays& args) const {
  const Problem p = Problem::of(inv);
  HostArrays full(full_count(p.backward));
  for (std::size_t i = 0; i < args.size(); ++i) full[p.full_index(i)] = args[i];
  return loops(p, full, gammas(p, host_reader(full)));
}

std::vector<SampledOutput> LinearAttentionKernel::sampled_reference(const Invocation& inv, const ArgReader& read) const {
  const Problem p = Problem::of(inv);
  // This kernel's position of each full argument position.
  std::vector<std::size_t> position(full_count(p.backward), 0);
  for (std::size_t i = 0; i < inv.args.size(); ++i) position[p.full_index(i)] = i;
  const ArgReader full = [&](std::size_t arg, std::int64_t first, std::int64_t count) { return read(position[arg], first, count); };
  const std::vector<double> gamma = gammas(p, full);
  const Sequences seqs = read_sequences(p, full);
  const std::vector<Output> outs = outputs(p);
  std::vector<std::pair<std::size_t, SampledPairs>> got;
  for (const Output& o : outs)
    if (o.present) got.push_back({position[o.arg], {}});
  // A token's output depends on every earlier one of its (sequence, head): the sampled pairs'
  // loops run whole, from just their rows, and keep 8 token rows each (and the pair's state).
  for (std::int64_t pair : sample_positions(p.num_seqs * p.heads, p.backward ? 2 : 4)) {
    const std::int64_t n = pair / p.heads, h = pair % p.heads, start = seqs.start[I(n)];
    const PairIn x(p, full, n, start, seqs.len[I(n)], h, gamma);
    const PairOut y = p.backward ? pair_backward(p, x) : pair_forward(p, x);
    std::size_t a = 0;
    for (const Output& o : outs) {
      if (!o.present) continue;
      const std::vector<double>& v = y.*o.values;
      const std::vector<std::int64_t> rows = o.per_token ? sample_positions(x.len, 8) : std::vector<std::int64_t>{0};
      for (std::int64_t r : rows) {
        const std::int64_t row = o.per_token ? (start + r) * p.heads + h : n * p.heads + h;
        for (std::int64_t e = 0; e < o.width; ++e) got[a].second.emplace_back(row * o.width + e, v[I(r * o.width + e)]);
      }
      ++a;
    }
  }
  return sampled_outputs(std::move(got));
}

double LinearAttentionKernel::tolerance(const Invocation& inv) const {
  const Problem p = Problem::of(inv);
  const double longest = static_cast<double>(std::max<std::int64_t>(1, p.seq) * std::max(p.K, p.V));
  const double t = default_tolerance(p.dtype) * std::max(1.0, std::sqrt(longest / 1024.0));
  return p.backward ? t * gradient_tolerance_factor : t;
}

std::vector<Fill> LinearAttentionKernel::fills(const Invocation& inv, std::uint64_t /*seed*/) const {
  const Problem p = Problem::of(inv);
  const auto defs = args();
  std::vector<Fill> a = standard_fills(inv, defs);
  for (std::size_t i = 0; i < inv.args.size(); ++i) {
    const std::size_t f = p.full_index(i);
    const bool is_gate = f == fwd::g || f == fwd::g_gamma || f == fwd::gk || f == fwd::gv;
    if (is_gate && a[i].kind == Fill::Kind::uniform) a[i] = Fill::uniform(-0.3f, -0.01f);
  }
  if (p.varlen) {
    // Uneven cuts: sequence n ends near (n + 1)^2 / N^2 of the tokens.
    std::vector<double> cu(I(p.num_seqs + 1), 0.0);
    for (std::int64_t n = 1; n <= p.num_seqs; ++n)
      cu[I(n)] = std::floor(static_cast<double>(p.seq) * static_cast<double>(n * n) / static_cast<double>(p.num_seqs * p.num_seqs));
    a[p.variant == Variant::lightning ? 4 : fwd::cu_seqlens] = Fill::of(std::move(cu));
  }
  return a;
}

std::vector<std::string> recipe_sizes() { return {"seq", "heads", "head_dim", "batch", "v_head_dim", "num_seqs"}; }

Invocation LinearAttentionKernel::from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                                             const nlohmann::json& options) const {
  const std::string kname(name());
  const std::string list = "seq, heads, head_dim; optional batch (1), v_head_dim (head_dim), num_seqs (packed)";
  const RecipeSizes given(kname, sizes, recipe_sizes(), list);
  auto size = [&](const char* n, std::int64_t fallback) {
    const std::int64_t v = given(n, fallback);
    if (sizes.count(n) && v <= 0 && std::string(n) != "seq")
      throw InvalidArgument(kname + " size '" + n + "' must be positive, got " + std::to_string(v));
    return v;
  };
  const std::int64_t seq = size("seq", -1), H = size("heads", -1), K = size("head_dim", -1);
  const std::int64_t B = size("batch", 1), V = size("v_head_dim", K), N = size("num_seqs", 0);
  if (N > 0 && B != 1) throw InvalidArgument(kname + ": packed sequences (num_seqs) need batch 1");
  bool reverse = false, h0 = false, ht = false;
  double scale = 0.0;
  std::int64_t layer_idx = 0, num_layers = 1;
  std::string slopes = "linear";
  bool g = false, gamma = false, gk = false, gv = false;
  const bool light = variant_ == Variant::lightning;
  const char* ht_name = backward_ ? "dht" : "final_state";
  const std::string options_list = std::string("reverse, initial_state, ") + ht_name + ", scale" +
                                   (light ? ", layer_idx, num_layers, slopes" : ", gates");
  for (const auto& item : options.items()) {
    const std::string& key = item.key();  // names lambdas can capture (Clang < 16: no bindings)
    const nlohmann::json& val = item.value();
    auto boolean = [&] {
      if (!val.is_boolean()) throw InvalidArgument(kname + " option '" + key + "' must be a boolean, got " + val.dump());
      return val.get<bool>();
    };
    if (key == "reverse") reverse = boolean();
    else if (key == "initial_state") h0 = boolean();
    else if (key == ht_name) ht = boolean();
    else if (key == "scale" && val.is_number()) scale = val.get<double>();
    else if (light && (key == "layer_idx" || key == "num_layers") && val.is_number_integer())
      (key == "layer_idx" ? layer_idx : num_layers) = val.get<std::int64_t>();
    else if (light && key == "slopes" && val.is_string()) slopes = val.get<std::string>();
    else if (!light && key == "gates" && val.is_array()) {
      for (const auto& x : val) {
        const std::string s = x.is_string() ? x.get<std::string>() : x.dump();
        if (s == "g") g = true;
        else if (s == "g_gamma") gamma = true;
        else if (s == "gk") gk = true;
        else if (s == "gv") gv = true;
        else throw InvalidArgument(kname + " option 'gates' names '" + s + "' (gates: g, g_gamma, gk, gv)");
      }
    } else {
      throw InvalidArgument(kname + " has no option '" + key + "' of that type (options: " + options_list + ")");
    }
  }
  const std::int64_t states = N > 0 ? N : B, Bq = N > 0 ? 1 : B;
  const TensorSpec qs{{Bq, seq, H, K}, dtype}, vs{{Bq, seq, H, V}, dtype}, ss{{states, H, K, V}, dtype};
  const TensorSpec cu = N > 0 ? TensorSpec{{N + 1}, DType::i32} : absent();
  auto opt = [&](bool on, TensorSpec s) { return on ? s : absent(); };
  std::vector<TensorSpec> full;
  if (!backward_)
    full = {qs, qs, vs, opt(g, {{Bq, seq, H}, dtype}), opt(gamma, {{H}, dtype}), opt(gk, qs), opt(gv, vs), opt(h0, ss), cu,
            vs, opt(ht, ss)};
  else
    full = {qs, qs, vs, opt(g, {{Bq, seq, H}, dtype}), opt(gamma, {{H}, dtype}), opt(gk, qs), opt(gv, vs), opt(h0, ss), cu,
            vs, opt(ht, ss), qs, qs, vs, opt(g, {{Bq, seq, H}, dtype}), opt(gk, qs), opt(gv, vs), opt(h0, ss)};
  std::vector<TensorSpec> args;
  if (light)
    for (std::size_t i : lightning_list(backward_)) args.push_back(full[i]);
  else
    args = full;
  Invocation inv = make_invocation(variant_, backward_, args, reverse, scale, layer_idx, num_layers, slopes);
  validate(inv);
  return inv;
}

EJK_BUILTIN(kernels, "linear_attention") {
  for (Variant v : variants)
    for (bool backward : {false, true}) r.add(std::make_shared<LinearAttentionKernel>(v, backward));
}

}  // namespace ejk::kernels::linear_attention
