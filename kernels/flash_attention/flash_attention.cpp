#include "flash_attention/flash_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "common/builtin.hpp"
#include "common/philox.h"
#include "common/sampled.hpp"
#include "common/sequences.hpp"
#include "core/parts.hpp"
#include "ejk/error.hpp"

namespace ejk::kernels::flash_attention {

namespace {

const char* const forward_names[fwd::count] = {"q",           "k",           "v",           "bias",
                                               "softmax_aux", "cu_seqlens_q", "cu_seqlens_k", "q_segment_ids",
                                               "kv_segment_ids", "out",      "lse"};
const char* const backward_names[bwd::count] = {
    "q",           "k",           "v",             "out",            "dout", "lse", "bias", "softmax_aux", "cu_seqlens_q",
    "cu_seqlens_k", "q_segment_ids", "kv_segment_ids", "dq", "dk", "dv", "dbias", "dsoftmax_aux"};

constexpr const char* option_names[] = {"causal",  "window_left",  "window_right", "logits_soft_cap",
                                        "dropout", "deterministic"};
constexpr const char* scalar_names[] = {"softmax_scale", "dropout_seed", "max_seqlen_q", "max_seqlen_k",
                                        "diagonal_offset"};

std::string describe(const char* name, const TensorSpec& s) {
  return std::string(name) + " " + to_string(s.shape) + " " + std::string(to_string(s.dtype));
}

template <std::size_t N>
bool known(const char* const (&names)[N], const std::string& key) {
  for (const char* n : names)
    if (key == n) return true;
  return false;
}

template <std::size_t N>
std::string listing(const char* const (&names)[N]) {
  std::string s;
  for (const char* n : names) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

// Reads the options and scalars of either kernel; `k` names the kernel in messages.
void read_options(const Invocation& inv, const std::string& k, Problem& p) {
  for (const auto& [key, _] : inv.options.items())
    if (!known(option_names, key)) throw InvalidArgument(k + " has no option '" + key + "' (options: " + listing(option_names) + ")");
  for (const auto& [key, _] : inv.scalars.items())
    if (!known(scalar_names, key)) throw InvalidArgument(k + " has no scalar '" + key + "' (scalars: " + listing(scalar_names) + ")");
  auto number = [&](const nlohmann::json& from, const char* kind, const char* name, double fallback) {
    if (!from.contains(name)) return fallback;
    const auto& v = from.at(name);
    if (!v.is_number()) throw InvalidArgument(k + " " + kind + " '" + name + "' must be a number, got " + v.dump());
    double d = v.get<double>();
    if (!std::isfinite(d)) throw InvalidArgument(k + " " + kind + " '" + name + "' must be finite, got " + v.dump());
    return d;
  };
  auto integer = [&](const nlohmann::json& from, const char* kind, const char* name, std::int64_t fallback) {
    if (!from.contains(name)) return fallback;
    const auto& v = from.at(name);
    if (!v.is_number_integer()) throw InvalidArgument(k + " " + kind + " '" + name + "' must be an integer, got " + v.dump());
    return v.get<std::int64_t>();
  };
  for (auto [name, field] : {std::pair{"causal", &p.causal}, std::pair{"deterministic", &p.deterministic}})
    if (inv.options.contains(name)) {
      const auto& v = inv.options.at(name);
      if (!v.is_boolean()) throw InvalidArgument(k + " option '" + name + "' must be a boolean, got " + v.dump());
      *field = v.get<bool>();
    }
  p.window_left = integer(inv.options, "option", "window_left", -1);
  p.window_right = integer(inv.options, "option", "window_right", -1);
  for (auto [name, w] : {std::pair{"window_left", p.window_left}, std::pair{"window_right", p.window_right}})
    if (w < -1)
      throw InvalidArgument(k + ": sliding window " + name + " = " + std::to_string(w) +
                            " is negative (a size >= 0, or -1 for unbounded)");
  p.softcap = number(inv.options, "option", "logits_soft_cap", 0.0);
  if (p.softcap < 0) throw InvalidArgument(k + ": logits_soft_cap = " + std::to_string(p.softcap) + " must be >= 0 (0: off)");
  p.dropout = number(inv.options, "option", "dropout", 0.0);
  if (!(p.dropout >= 0.0 && p.dropout < 1.0))
    throw InvalidArgument(k + ": dropout probability " + std::to_string(p.dropout) + " is not in [0, 1)");
  p.threshold = dropout_threshold(p.dropout);
  p.scale = number(inv.scalars, "scalar", "softmax_scale", 0.0);
  if (inv.scalars.contains("dropout_seed")) {
    const auto& v = inv.scalars.at("dropout_seed");
    if (!v.is_number_integer() || (v.is_number_integer() && !v.is_number_unsigned() && v.get<std::int64_t>() < 0))
      throw InvalidArgument(k + " scalar 'dropout_seed' must be an unsigned integer, got " + v.dump());
    p.seed = v.get<std::uint64_t>();
  }
  p.seq_q = integer(inv.scalars, "scalar", "max_seqlen_q", 0);
  p.seq_k = integer(inv.scalars, "scalar", "max_seqlen_k", 0);
  if (p.seq_q < 0 || p.seq_k < 0) throw InvalidArgument(k + ": max_seqlen_q/k must be >= 0");
  p.diagonal_offset = integer(inv.scalars, "scalar", "diagonal_offset", 0);
  // Device programs compare positions in 32-bit integers.
  if (p.diagonal_offset < -(std::int64_t{1} << 30) || p.diagonal_offset > (std::int64_t{1} << 30))
    throw InvalidArgument(k + ": diagonal_offset " + std::to_string(p.diagonal_offset) + " is outside [-2^30, 2^30]");
}

// Validates the arguments common to both kernels. `n(i)` names argument i; `at(i)` gives it.
template <class At, class Name>
void read_arrays(const std::string& k, At at, Name n, std::size_t iq, std::size_t ik, std::size_t iv, std::size_t ibias,
                 std::size_t isinks, std::size_t icuq, std::size_t icuk, std::size_t isq, std::size_t isk, Problem& p) {
  const TensorSpec &q = at(iq), &kk = at(ik), &v = at(iv);
  auto fail = [&](const std::string& what) { throw InvalidArgument(k + ": " + what); };
  const bool cuq = !is_absent(at(icuq)), cuk = !is_absent(at(icuk));
  if (cuq != cuk)
    fail("packed variable-length input needs both cu_seqlens_q and cu_seqlens_k; got " + describe(n(icuq), at(icuq)) +
         " and " + describe(n(icuk), at(icuk)));
  p.varlen = cuq;
  const std::size_t rank = p.varlen ? 3 : 4;
  const char* layout = p.varlen ? "[total, heads, head_dim] (packed: cu_seqlens given)" : "[batch, seq, heads, head_dim]";
  for (std::size_t i : {iq, ik, iv}) {
    if (at(i).shape.size() != rank) fail(describe(n(i), at(i)) + " must have rank " + std::to_string(rank) + ": " + layout);
    for (auto d : at(i).shape)
      if (d <= 0) fail(describe(n(i), at(i)) + " has an empty dimension");
  }
  if (q.dtype != DType::f32 && q.dtype != DType::f16 && q.dtype != DType::bf16)
    fail(describe(n(iq), q) + ": dtype " + std::string(to_string(q.dtype)) + " is not supported (f32, f16, bf16)");
  for (std::size_t i : {ik, iv})
    if (at(i).dtype != q.dtype) fail("dtypes differ: " + describe(n(iq), q) + ", " + describe(n(i), at(i)));
  p.dtype = q.dtype;
  p.head_dim = q.shape[rank - 1];
  p.heads = q.shape[rank - 2];
  p.kv_heads = kk.shape[rank - 2];
  if (p.head_dim > max_head_dim)
    fail(describe(n(iq), q) + ": head_dim " + std::to_string(p.head_dim) + " is not supported (1 to " +
         std::to_string(max_head_dim) + ")");
  if (kk.shape[rank - 1] != p.head_dim || v.shape[rank - 1] != p.head_dim)
    fail("head_dim differs: " + describe(n(iq), q) + ", " + describe(n(ik), kk) + ", " + describe(n(iv), v));
  if (v.shape != kk.shape) fail(describe(n(iv), v) + " must have the shape of " + describe(n(ik), kk));
  if (p.heads % p.kv_heads != 0)
    fail("kv_heads " + std::to_string(p.kv_heads) + " of " + describe(n(ik), kk) + " does not divide heads " +
         std::to_string(p.heads) + " of " + describe(n(iq), q));
  if (p.varlen) {
    for (std::size_t i : {icuq, icuk})
      if (at(i).shape.size() != 1 || at(i).shape[0] < 2 || at(i).dtype != DType::i32)
        fail(describe(n(i), at(i)) + " must be i32 [batch + 1] with batch >= 1");
    if (at(icuq).shape != at(icuk).shape)
      fail("cu_seqlens differ in batch: " + describe(n(icuq), at(icuq)) + ", " + describe(n(icuk), at(icuk)));
    p.batch = at(icuq).shape[0] - 1;
    p.total_q = q.shape[0];
    p.total_k = kk.shape[0];
    // Unknown maxima are taken as the totals: a bound that always holds.
    if (p.seq_q == 0) p.seq_q = p.total_q;
    if (p.seq_k == 0) p.seq_k = p.total_k;
  } else {
    if (kk.shape[0] != q.shape[0])
      fail("batch differs: " + describe(n(iq), q) + ", " + describe(n(ik), kk));
    p.batch = q.shape[0];
    p.seq_q = q.shape[1];
    p.seq_k = kk.shape[1];
    p.total_q = p.batch * p.seq_q;
    p.total_k = p.batch * p.seq_k;
  }
  if (p.scale == 0.0) p.scale = 1.0 / std::sqrt(static_cast<double>(p.head_dim));

  const TensorSpec& bias = at(ibias);
  p.has_bias = !is_absent(bias);
  if (p.has_bias) {
    if (p.varlen) fail(describe(n(ibias), bias) + ": a bias is not supported with packed variable-length input");
    if (!is_float(bias.dtype)) fail(describe(n(ibias), bias) + " must have a float dtype");
    const auto& s = bias.shape;
    if (s.size() != 4 || (s[0] != 1 && s[0] != p.batch) || (s[1] != 1 && s[1] != p.heads) || s[2] != p.seq_q ||
        s[3] != p.seq_k)
      fail(describe(n(ibias), bias) + " is not broadcastable: expected [" + std::to_string(p.batch) + " or 1, " +
           std::to_string(p.heads) + " or 1, " + std::to_string(p.seq_q) + ", " + std::to_string(p.seq_k) + "]");
    p.bias_batch = s[0];
    p.bias_heads = s[1];
    p.bias_dtype = bias.dtype;
  }
  const TensorSpec& sinks = at(isinks);
  p.has_sinks = !is_absent(sinks);
  if (p.has_sinks) {
    if (sinks.shape != Shape{p.heads} || !is_float(sinks.dtype))
      fail(describe(n(isinks), sinks) + " must be a float [" + std::to_string(p.heads) + "]: one sink logit per head");
    p.sinks_dtype = sinks.dtype;
  }
  const bool sq = !is_absent(at(isq)), sk = !is_absent(at(isk));
  if (sq != sk)
    fail("segment ids need both q_segment_ids and kv_segment_ids; got " + describe(n(isq), at(isq)) + " and " +
         describe(n(isk), at(isk)));
  p.has_segments = sq;
  if (p.has_segments) {
    Shape want_q(q.shape.begin(), q.shape.end() - 2), want_k(kk.shape.begin(), kk.shape.end() - 2);
    if (at(isq).shape != want_q || at(isq).dtype != DType::i32)
      fail(describe(n(isq), at(isq)) + " must be i32 " + to_string(want_q) + " (q's token dimensions)");
    if (at(isk).shape != want_k || at(isk).dtype != DType::i32)
      fail(describe(n(isk), at(isk)) + " must be i32 " + to_string(want_k) + " (k's token dimensions)");
  }
}

void expect(const std::string& k, const char* name, const TensorSpec& got, const Shape& shape, DType dtype,
            const std::string& what) {
  if (got.shape != shape || got.dtype != dtype)
    throw InvalidArgument(k + ": " + describe(name, got) + " must be " + to_string(shape) + " " +
                          std::string(to_string(dtype)) + " (" + what + ")");
}

Shape lse_shape(const Problem& p) {
  return p.varlen ? Shape{p.heads, p.total_q} : Shape{p.batch, p.heads, p.seq_q};
}

std::vector<std::int64_t> as_int(const std::vector<double>& v) {
  std::vector<std::int64_t> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<std::int64_t>(v[i]);
  return out;
}

// The arrays and per-sequence ranges a reference reads.
struct RefView {
  const Problem& p;
  const Sequences seq;
  const std::vector<double>&q, &k, &v, &bias, &sinks, &qseg, &kseg;
  // Where the arrays start. Whole arrays: token 0, head 0, every head. A sampled reference holds
  // windows: q and q_segment_ids from token q_t0 and head q_h0 (q_heads heads a token), k, v and
  // kv_segment_ids from token k_t0 and kv head k_h0 (k_heads a token), bias from element bias0.
  std::int64_t q_t0 = 0, q_h0 = 0, q_heads = 0, k_t0 = 0, k_h0 = 0, k_heads = 0, bias0 = 0;

  double qv(std::int64_t t, std::int64_t h, std::int64_t d) const { return q[idx(t - q_t0, h - q_h0, q_heads, d)]; }
  double kv(std::int64_t t, std::int64_t h, std::int64_t d) const { return k[idx(t - k_t0, h - k_h0, k_heads, d)]; }
  double vv(std::int64_t t, std::int64_t h, std::int64_t d) const { return v[idx(t - k_t0, h - k_h0, k_heads, d)]; }
  std::size_t idx(std::int64_t t, std::int64_t h, std::int64_t nh, std::int64_t d) const {
    return static_cast<std::size_t>((t * nh + h) * p.head_dim + d);
  }
  bool allowed(std::int64_t b, std::int64_t i, std::int64_t j) const {
    std::int64_t lq = seq.q_len[static_cast<std::size_t>(b)], lk = seq.k_len[static_cast<std::size_t>(b)];
    if (j < p.key_lo(i, lq, lk) || j > p.key_hi(i, lq, lk)) return false;
    if (p.has_segments) {
      std::int64_t tq = seq.q_start[static_cast<std::size_t>(b)] + i, tk = seq.k_start[static_cast<std::size_t>(b)] + j;
      if (qseg[static_cast<std::size_t>(tq - q_t0)] != kseg[static_cast<std::size_t>(tk - k_t0)]) return false;
    }
    return true;
  }
  bool kept(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    if (p.dropout == 0.0) return true;
    return ejk_dropout_keep(static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(h), static_cast<std::uint32_t>(i),
                            static_cast<std::uint32_t>(j), static_cast<std::uint32_t>(p.seed),
                            static_cast<std::uint32_t>(p.seed >> 32), p.threshold) != 0;
  }
  // u (scaled logit plus bias) for query token tq and key token tk of sequence b.
  double logit(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    std::int64_t tq = seq.q_start[static_cast<std::size_t>(b)] + i, tk = seq.k_start[static_cast<std::size_t>(b)] + j;
    std::int64_t hk = h / p.group();
    double dot = 0;
    for (std::int64_t d = 0; d < p.head_dim; ++d) dot += qv(tq, h, d) * kv(tk, hk, d);
    double u = p.scale * dot;
    if (p.has_bias) u += bias[static_cast<std::size_t>(p.bias_index(b, h, i, j) - bias0)];
    return u;
  }
  double capped(double u) const { return p.softcap > 0 ? p.softcap * std::tanh(u / p.softcap) : u; }
};

RefView view(const Problem& p, const HostArrays& a, std::size_t iq, std::size_t ik, std::size_t iv, std::size_t ibias,
             std::size_t isinks, std::size_t icuq, std::size_t icuk, std::size_t isq, std::size_t isk) {
  RefView r{p, sequences(p, as_int(a[icuq]), as_int(a[icuk])), a[iq], a[ik], a[iv], a[ibias], a[isinks], a[isq], a[isk]};
  r.q_heads = p.heads;
  r.k_heads = p.kv_heads;
  return r;
}

// Tokens [t0, t0 + n) of head `head` of a [tokens][heads][dim] argument: [n][dim].
std::vector<double> head_tokens(const ArgReader& read, std::size_t arg, std::int64_t t0, std::int64_t n, std::int64_t heads,
                                std::int64_t head, std::int64_t dim) {
  return row_slices(read, arg, t0 * heads * dim, heads * dim, n, head * dim, dim);
}

// One query row of the reference: logits z, probabilities P and lse; `n` keys, -inf where masked.
struct Row {
  std::vector<double> z, u, P;
  double lse = -std::numeric_limits<double>::infinity();
  double p_sink = 0;  // exp(sink - lse)
};

Row row(const RefView& r, std::int64_t b, std::int64_t h, std::int64_t i) {
  const Problem& p = r.p;
  std::int64_t lk = r.seq.k_len[static_cast<std::size_t>(b)];
  Row out;
  const double ninf = -std::numeric_limits<double>::infinity();
  out.z.assign(static_cast<std::size_t>(lk), ninf);
  out.u.assign(static_cast<std::size_t>(lk), 0.0);
  out.P.assign(static_cast<std::size_t>(lk), 0.0);
  double m = p.has_sinks ? r.sinks[static_cast<std::size_t>(h)] : ninf;
  for (std::int64_t j = 0; j < lk; ++j)
    if (r.allowed(b, i, j)) {
      out.u[static_cast<std::size_t>(j)] = r.logit(b, h, i, j);
      out.z[static_cast<std::size_t>(j)] = r.capped(out.u[static_cast<std::size_t>(j)]);
      m = std::max(m, out.z[static_cast<std::size_t>(j)]);
    }
  if (m == ninf) return out;
  double sum = p.has_sinks ? std::exp(r.sinks[static_cast<std::size_t>(h)] - m) : 0.0;
  for (double z : out.z) sum += std::exp(z - m);
  out.lse = m + std::log(sum);
  for (std::size_t j = 0; j < out.z.size(); ++j) out.P[j] = std::exp(out.z[j] - out.lse);
  if (p.has_sinks) out.p_sink = std::exp(r.sinks[static_cast<std::size_t>(h)] - out.lse);
  return out;
}

// What every sampled reference reads whole: the sequences (from cu_seqlens when packed) and
// the sinks. The argument positions differ between forward and backward.
struct SampleContext {
  Sequences seq;
  std::vector<double> sinks;
};

SampleContext sample_context(const Problem& p, const Invocation& inv, const ArgReader& read, std::size_t icuq,
                             std::size_t icuk, std::size_t isinks) {
  auto whole = [&](std::size_t arg) { return read(arg, 0, numel(inv.args[arg].shape)); };
  const std::vector<double> cuq = p.varlen ? whole(icuq) : std::vector<double>{};
  const std::vector<double> cuk = p.varlen ? whole(icuk) : std::vector<double>{};
  return {sequences(p, as_int(cuq), as_int(cuk)), p.has_sinks ? whole(isinks) : std::vector<double>{}};
}

}  // namespace

std::vector<ArgDef> forward_args() {
  std::vector<ArgDef> a;
  for (std::size_t i = 0; i < fwd::count; ++i) a.push_back({forward_names[i], i >= fwd::out ? Role::out : Role::in});
  return a;
}

std::vector<ArgDef> backward_args() {
  std::vector<ArgDef> a;
  for (std::size_t i = 0; i < bwd::count; ++i) a.push_back({backward_names[i], i >= bwd::dq ? Role::out : Role::in});
  return a;
}

TensorSpec absent() { return {Shape{0}, DType::f32}; }

std::uint32_t dropout_threshold(double p) {
  if (!(p > 0.0)) return 0;
  double t = std::floor(p * 4294967296.0);
  return t >= 4294967295.0 ? 0xFFFFFFFFu : static_cast<std::uint32_t>(t);
}

namespace {
Invocation make(const char* kernel, std::span<const TensorSpec> args, const Options& o) {
  Invocation inv;
  inv.kernel = kernel;
  inv.args.assign(args.begin(), args.end());
  inv.options = {{"causal", o.causal},
                 {"window_left", o.window_left},
                 {"window_right", o.window_right},
                 {"logits_soft_cap", o.logits_soft_cap},
                 {"dropout", o.dropout}};
  // Only where asked, so that every other invocation keeps its signature (cache keys, bundles).
  if (o.deterministic) inv.options["deterministic"] = true;
  inv.scalars = nlohmann::json::object();
  if (o.softmax_scale != 0.0) inv.scalars["softmax_scale"] = o.softmax_scale;
  if (o.dropout > 0.0) inv.scalars["dropout_seed"] = o.dropout_seed;
  if (o.max_seqlen_q > 0) inv.scalars["max_seqlen_q"] = o.max_seqlen_q;
  if (o.max_seqlen_k > 0) inv.scalars["max_seqlen_k"] = o.max_seqlen_k;
  if (o.diagonal_offset != 0) inv.scalars["diagonal_offset"] = o.diagonal_offset;
  return inv;
}
}  // namespace

Invocation forward_invocation(std::span<const TensorSpec> args, const Options& o) {
  return make("flash_attention", args, o);
}
Invocation backward_invocation(std::span<const TensorSpec> args, const Options& o) {
  return make("flash_attention_bwd", args, o);
}

Problem Problem::of(const Invocation& inv) {
  Problem p;
  p.backward = inv.kernel == "flash_attention_bwd";
  const std::string k = p.backward ? "flash_attention_bwd" : "flash_attention";
  const std::size_t count = p.backward ? bwd::count : fwd::count;
  const char* const* names = p.backward ? backward_names : forward_names;
  if (inv.args.size() != count) {
    std::string list;
    for (std::size_t i = 0; i < count; ++i) list += (i ? ", " : "") + std::string(names[i]);
    throw InvalidArgument(k + " takes " + std::to_string(count) + " arguments (" + list + "), got " +
                          std::to_string(inv.args.size()));
  }
  read_options(inv, k, p);
  auto at = [&](std::size_t i) -> const TensorSpec& { return inv.args[i]; };
  auto n = [&](std::size_t i) { return names[i]; };
  if (!p.backward) {
    read_arrays(k, at, n, fwd::q, fwd::k, fwd::v, fwd::bias, fwd::softmax_aux, fwd::cu_seqlens_q, fwd::cu_seqlens_k,
                fwd::q_segment_ids, fwd::kv_segment_ids, p);
    expect(k, "out", inv.args[fwd::out], inv.args[fwd::q].shape, p.dtype, "like q");
    expect(k, "lse", inv.args[fwd::lse], lse_shape(p), DType::f32, p.varlen ? "[heads, total_q]" : "[batch, heads, seq_q]");
  } else {
    read_arrays(k, at, n, bwd::q, bwd::k, bwd::v, bwd::bias, bwd::softmax_aux, bwd::cu_seqlens_q, bwd::cu_seqlens_k,
                bwd::q_segment_ids, bwd::kv_segment_ids, p);
    const Shape& qs = inv.args[bwd::q].shape;
    const Shape& ks = inv.args[bwd::k].shape;
    expect(k, "out", inv.args[bwd::out], qs, p.dtype, "the forward's output, like q");
    expect(k, "dout", inv.args[bwd::dout], qs, p.dtype, "like q");
    expect(k, "lse", inv.args[bwd::lse], lse_shape(p), DType::f32, "the forward's log-sum-exp");
    expect(k, "dq", inv.args[bwd::dq], qs, p.dtype, "like q");
    expect(k, "dk", inv.args[bwd::dk], ks, p.dtype, "like k");
    expect(k, "dv", inv.args[bwd::dv], ks, p.dtype, "like v");
    const TensorSpec& bias = inv.args[bwd::bias];
    const TensorSpec& sinks = inv.args[bwd::softmax_aux];
    if (p.has_bias) expect(k, "dbias", inv.args[bwd::dbias], bias.shape, bias.dtype, "like bias");
    else if (!is_absent(inv.args[bwd::dbias]))
      throw InvalidArgument(k + ": " + describe("dbias", inv.args[bwd::dbias]) + " given without a bias: must be [0]");
    if (p.has_sinks) expect(k, "dsoftmax_aux", inv.args[bwd::dsoftmax_aux], sinks.shape, sinks.dtype, "like softmax_aux");
    else if (!is_absent(inv.args[bwd::dsoftmax_aux]))
      throw InvalidArgument(k + ": " + describe("dsoftmax_aux", inv.args[bwd::dsoftmax_aux]) +
                            " given without softmax_aux: must be [0]");
  }
  return p;
}

Sequences sequences(const Problem& p, std::span<const std::int64_t> cu_q, std::span<const std::int64_t> cu_k) {
  Sequences s;
  const auto n = static_cast<std::size_t>(p.batch);
  s.q_start.resize(n);
  s.q_len.resize(n);
  s.k_start.resize(n);
  s.k_len.resize(n);
  if (!p.varlen) {
    for (std::size_t b = 0; b < n; ++b) {
      s.q_start[b] = static_cast<std::int64_t>(b) * p.seq_q;
      s.q_len[b] = p.seq_q;
      s.k_start[b] = static_cast<std::int64_t>(b) * p.seq_k;
      s.k_len[b] = p.seq_k;
    }
    return s;
  }
  if (cu_q.size() != n + 1 || cu_k.size() != n + 1)
    throw InvalidArgument("cu_seqlens_q/k hold " + std::to_string(cu_q.size()) + "/" + std::to_string(cu_k.size()) +
                          " values for batch " + std::to_string(n));
  check_cu_seqlens(cu_q, "cu_seqlens_q", p.total_q);
  check_cu_seqlens(cu_k, "cu_seqlens_k", p.total_k);
  for (std::size_t b = 0; b < n; ++b) {
    s.q_start[b] = cu_q[b];
    s.q_len[b] = cu_q[b + 1] - cu_q[b];
    s.k_start[b] = cu_k[b];
    s.k_len[b] = cu_k[b + 1] - cu_k[b];
    if (s.q_len[b] > p.seq_q || s.k_len[b] > p.seq_k)
      throw InvalidArgument("sequence " + std::to_string(b) + " has " + std::to_string(s.q_len[b]) + " queries and " +
                            std::to_string(s.k_len[b]) + " keys, more than max_seqlen_q " + std::to_string(p.seq_q) +
                            " / max_seqlen_k " + std::to_string(p.seq_k));
  }
  return s;
}

// ---- forward ------------------------------------------------------------------------------

void FlashAttentionKernel::check(const Invocation& inv) const { (void)Problem::of(inv); }

namespace {
Vars problem_vars(const Problem& p) {
  return {{"batch", p.batch},
          {"seq_q", p.seq_q},
          {"seq_k", p.seq_k},
          {"total_q", p.total_q},
          {"total_k", p.total_k},
          {"heads", p.heads},
          {"kv_heads", p.kv_heads},
          {"head_dim", p.head_dim},
          {"causal", std::int64_t{p.causal}},
          {"window_left", p.window_left},
          {"window_right", p.window_right},
          {"varlen", std::int64_t{p.varlen}},
          {"bias", std::int64_t{p.has_bias}},
          {"sinks", std::int64_t{p.has_sinks}},
          {"segments", std::int64_t{p.has_segments}},
          {"softcap", std::int64_t{p.softcap > 0}},
          {"dropout", std::int64_t{p.dropout > 0}},
          {"deterministic", std::int64_t{p.deterministic}},
          {"dtype", std::string(to_string(p.dtype))},
          {"dtype_size", static_cast<std::int64_t>(dtype_size(p.dtype))}};
}

// Query-key pairs counted for FLOPs: every pair of each sequence (packed input: every query
// against max_seqlen_k keys), halved when causal; windows and segments are not counted.
double pairs(const Problem& p) {
  double n = p.varlen ? static_cast<double>(p.total_q) * static_cast<double>(p.seq_k)
                      : static_cast<double>(p.batch) * static_cast<double>(p.seq_q) * static_cast<double>(p.seq_k);
  return p.causal ? n / 2 : n;
}

double base_tolerance(const Problem& p) {
  // f32 sums over seq_k probabilities and head_dim products: the error grows like their square root.
  double growth = std::sqrt(static_cast<double>(std::max(p.seq_k, p.head_dim)) / 256.0);
  return default_tolerance(p.dtype) * std::max(1.0, growth);
}
}  // namespace

Vars FlashAttentionKernel::vars(const Invocation& inv) const { return problem_vars(Problem::of(inv)); }

double FlashAttentionKernel::flops(const Invocation& inv) const {
  Problem p = Problem::of(inv);
  return 4.0 * pairs(p) * static_cast<double>(p.heads) * static_cast<double>(p.head_dim);
}

double FlashAttentionKernel::bytes(const Invocation& inv) const {
  Problem p = Problem::of(inv);
  double e = static_cast<double>(dtype_size(p.dtype));
  double qo = static_cast<double>(p.total_q * p.heads * p.head_dim) * 2;  // q read, out written
  double kv = static_cast<double>(p.total_k * p.kv_heads * p.head_dim) * 2;
  double extra = static_cast<double>(p.total_q * p.heads) * 4;  // lse
  if (p.has_bias)
    extra += static_cast<double>(p.bias_batch * p.bias_heads * p.seq_q * p.seq_k) * static_cast<double>(dtype_size(p.bias_dtype));
  if (p.has_segments) extra += static_cast<double>(p.total_q + p.total_k) * 4;
  return e * (qo + kv) + extra;
}

HostArrays FlashAttentionKernel::reference(const Invocation& inv, const HostArrays& args) const {
  const Problem p = Problem::of(inv);
  const RefView r = view(p, args, fwd::q, fwd::k, fwd::v, fwd::bias, fwd::softmax_aux, fwd::cu_seqlens_q,
                         fwd::cu_seqlens_k, fwd::q_segment_ids, fwd::kv_segment_ids);
  std::vector<double> out(static_cast<std::size_t>(p.total_q * p.heads * p.head_dim), 0.0);
  std::vector<double> lse(static_cast<std::size_t>(p.total_q * p.heads), 0.0);
  const double keep_scale = 1.0 / (1.0 - p.dropout);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads; ++h)
      for (std::int64_t i = 0; i < r.seq.q_len[static_cast<std::size_t>(b)]; ++i) {
        const std::int64_t tq = r.seq.q_start[static_cast<std::size_t>(b)] + i;
        Row w = row(r, b, h, i);
        lse[static_cast<std::size_t>(p.lse_index(b, h, i, tq))] = w.lse;
        for (std::size_t j = 0; j < w.P.size(); ++j) {
          if (w.P[j] == 0.0 || !r.kept(b, h, i, static_cast<std::int64_t>(j))) continue;
          const std::int64_t tk = r.seq.k_start[static_cast<std::size_t>(b)] + static_cast<std::int64_t>(j);
          const double pj = w.P[j] * keep_scale;
          for (std::int64_t d = 0; d < p.head_dim; ++d)
            out[r.idx(tq, h, p.heads, d)] += pj * r.vv(tk, h / p.group(), d);
        }
      }
  return {std::move(out), std::move(lse)};
}

double FlashAttentionKernel::tolerance(const Invocation& inv) const { return base_tolerance(Problem::of(inv)); }

std::vector<SampledOutput> FlashAttentionKernel::sampled_reference(const Invocation& inv, const ArgReader& read) const {
  const Problem p = Problem::of(inv);
  const SampleContext context = sample_context(p, inv, read, fwd::cu_seqlens_q, fwd::cu_seqlens_k, fwd::softmax_aux);
  const Sequences& seq = context.seq;
  const std::vector<double>& sinks = context.sinks;
  const std::int64_t dim = p.head_dim;
  const double keep_scale = 1.0 / (1.0 - p.dropout);
  std::vector<std::pair<std::int64_t, double>> outs, lses;
  // (sequence, kv head) pairs spread over both; in each, rows spread over its query heads and
  // positions, the first and last query among them.
  for (std::int64_t pair : sample_positions(p.batch * p.kv_heads, 4)) {
    const std::int64_t b = pair / p.kv_heads, kh = pair % p.kv_heads;
    const std::int64_t lq = seq.q_len[static_cast<std::size_t>(b)], lk = seq.k_len[static_cast<std::size_t>(b)];
    const std::int64_t q0 = seq.q_start[static_cast<std::size_t>(b)], k0 = seq.k_start[static_cast<std::size_t>(b)];
    if (lq == 0) continue;
    const std::vector<double> k = head_tokens(read, fwd::k, k0, lk, p.kv_heads, kh, dim);
    const std::vector<double> v = head_tokens(read, fwd::v, k0, lk, p.kv_heads, kh, dim);
    const std::vector<double> kseg = p.has_segments ? read(fwd::kv_segment_ids, k0, lk) : std::vector<double>{};
    for (std::int64_t r : sample_positions(p.group() * lq, 8)) {
      const std::int64_t h = kh * p.group() + r / lq, i = r % lq, tq = q0 + i;
      const std::vector<double> q = read(fwd::q, (tq * p.heads + h) * dim, dim);
      const std::vector<double> qseg = p.has_segments ? read(fwd::q_segment_ids, tq, 1) : std::vector<double>{};
      const std::vector<double> bias = p.has_bias ? read(fwd::bias, p.bias_index(b, h, i, 0), p.seq_k) : std::vector<double>{};
      RefView rv{p, seq, q, k, v, bias, sinks, qseg, kseg};
      rv.q_t0 = tq, rv.q_h0 = h, rv.q_heads = 1;
      rv.k_t0 = k0, rv.k_h0 = kh, rv.k_heads = 1;
      rv.bias0 = p.has_bias ? p.bias_index(b, h, i, 0) : 0;
      const Row w = row(rv, b, h, i);
      std::vector<double> o(static_cast<std::size_t>(dim), 0.0);
      for (std::size_t j = 0; j < w.P.size(); ++j) {
        if (w.P[j] == 0.0 || !rv.kept(b, h, i, static_cast<std::int64_t>(j))) continue;
        const double pj = w.P[j] * keep_scale;
        for (std::int64_t d = 0; d < dim; ++d) o[static_cast<std::size_t>(d)] += pj * rv.vv(k0 + static_cast<std::int64_t>(j), kh, d);
      }
      for (std::int64_t d = 0; d < dim; ++d) outs.emplace_back((tq * p.heads + h) * dim + d, o[static_cast<std::size_t>(d)]);
      lses.emplace_back(p.lse_index(b, h, i, tq), w.lse);
    }
  }
  return sampled_outputs({{fwd::out, std::move(outs)}, {fwd::lse, std::move(lses)}});
}

// ---- backward -----------------------------------------------------------------------------

void FlashAttentionBwdKernel::check(const Invocation& inv) const { (void)Problem::of(inv); }

Vars FlashAttentionBwdKernel::vars(const Invocation& inv) const { return problem_vars(Problem::of(inv)); }

double FlashAttentionBwdKernel::flops(const Invocation& inv) const {
  Problem p = Problem::of(inv);
  return 2.5 * 4.0 * pairs(p) * static_cast<double>(p.heads) * static_cast<double>(p.head_dim);
}

double FlashAttentionBwdKernel::bytes(const Invocation& inv) const {
  Problem p = Problem::of(inv);
  double e = static_cast<double>(dtype_size(p.dtype));
  double qside = static_cast<double>(p.total_q * p.heads * p.head_dim) * 4;  // q, out, dout read; dq written
  double kside = static_cast<double>(p.total_k * p.kv_heads * p.head_dim) * 4;  // k, v read; dk, dv written
  double extra = static_cast<double>(p.total_q * p.heads) * 4;
  if (p.has_bias)
    extra += 2 * static_cast<double>(p.bias_batch * p.bias_heads * p.seq_q * p.seq_k) *
             static_cast<double>(dtype_size(p.bias_dtype));
  if (p.has_segments) extra += static_cast<double>(p.total_q + p.total_k) * 4;
  return e * (qside + kside) + extra;
}

HostArrays FlashAttentionBwdKernel::reference(const Invocation& inv, const HostArrays& args) const {
  const Problem p = Problem::of(inv);
  const RefView r = view(p, args, bwd::q, bwd::k, bwd::v, bwd::bias, bwd::softmax_aux, bwd::cu_seqlens_q,
                         bwd::cu_seqlens_k, bwd::q_segment_ids, bwd::kv_segment_ids);
  const std::vector<double>& dout = args[bwd::dout];
  std::vector<double> dq(r.q.size(), 0.0), dk(r.k.size(), 0.0), dv(r.v.size(), 0.0);
  std::vector<double> dbias(p.has_bias ? r.bias.size() : 0, 0.0), dsinks(p.has_sinks ? r.sinks.size() : 0, 0.0);
  const double keep_scale = 1.0 / (1.0 - p.dropout);
  const std::int64_t D = p.head_dim;
  std::vector<double> dP;
  // Gradients of the exact forward, from q, k, v and dout alone (the saved out and lse are the
  // implementation's business).
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads; ++h)
      for (std::int64_t i = 0; i < r.seq.q_len[static_cast<std::size_t>(b)]; ++i) {
        const std::int64_t tq = r.seq.q_start[static_cast<std::size_t>(b)] + i, hk = h / p.group();
        Row w = row(r, b, h, i);
        if (w.lse == -std::numeric_limits<double>::infinity()) continue;
        const std::size_t lk = w.P.size();
        dP.assign(lk, 0.0);
        double Di = 0;
        for (std::size_t j = 0; j < lk; ++j) {
          if (w.P[j] == 0.0) continue;
          const std::int64_t tk = r.seq.k_start[static_cast<std::size_t>(b)] + static_cast<std::int64_t>(j);
          const double keep = r.kept(b, h, i, static_cast<std::int64_t>(j)) ? keep_scale : 0.0;
          double dpd = 0;
          for (std::int64_t d = 0; d < D; ++d) {
            const double g = dout[r.idx(tq, h, p.heads, d)];
            dpd += g * r.vv(tk, hk, d);
            dv[r.idx(tk, hk, p.kv_heads, d)] += w.P[j] * keep * g;
          }
          dP[j] = dpd * keep;
          Di += w.P[j] * dP[j];
        }
        if (p.has_sinks) dsinks[static_cast<std::size_t>(h)] -= w.p_sink * Di;
        for (std::size_t j = 0; j < lk; ++j) {
          if (w.P[j] == 0.0) continue;
          const std::int64_t tk = r.seq.k_start[static_cast<std::size_t>(b)] + static_cast<std::int64_t>(j);
          double du = w.P[j] * (dP[j] - Di);
          if (p.softcap > 0) {
            const double t = std::tanh(w.u[j] / p.softcap);
            du *= 1.0 - t * t;
          }
          if (p.has_bias) dbias[static_cast<std::size_t>(p.bias_index(b, h, i, static_cast<std::int64_t>(j)))] += du;
          for (std::int64_t d = 0; d < D; ++d) {
            dq[r.idx(tq, h, p.heads, d)] += p.scale * du * r.kv(tk, hk, d);
            dk[r.idx(tk, hk, p.kv_heads, d)] += p.scale * du * r.qv(tq, h, d);
          }
        }
      }
  return {std::move(dq), std::move(dk), std::move(dv), std::move(dbias), std::move(dsinks)};
}

std::vector<SampledOutput> FlashAttentionBwdKernel::sampled_reference(const Invocation& inv, const ArgReader& read) const {
  const Problem p = Problem::of(inv);
  const SampleContext context = sample_context(p, inv, read, bwd::cu_seqlens_q, bwd::cu_seqlens_k, bwd::softmax_aux);
  const Sequences& seq = context.seq;
  const std::vector<double>& sinks = context.sinks;
  const std::int64_t D = p.head_dim, G = p.group();
  const double keep_scale = 1.0 / (1.0 - p.dropout);
  // An unbroadcast dbias holds one du per element; a broadcast one sums over every sequence or
  // head, which a sample of pairs does not see.
  const bool dbias_sampled = p.has_bias && p.bias_batch == p.batch && p.bias_heads == p.heads;
  std::vector<std::pair<std::int64_t, double>> dqs, dks, dvs, dbs;
  for (std::int64_t pair : sample_positions(p.batch * p.kv_heads, 2)) {
    const std::int64_t b = pair / p.kv_heads, kh = pair % p.kv_heads;
    const std::int64_t lq = seq.q_len[static_cast<std::size_t>(b)], lk = seq.k_len[static_cast<std::size_t>(b)];
    const std::int64_t q0 = seq.q_start[static_cast<std::size_t>(b)], k0 = seq.k_start[static_cast<std::size_t>(b)];
    const std::vector<double> k = head_tokens(read, bwd::k, k0, lk, p.kv_heads, kh, D);
    const std::vector<double> v = head_tokens(read, bwd::v, k0, lk, p.kv_heads, kh, D);
    const std::vector<double> qseg = p.has_segments && lq ? read(bwd::q_segment_ids, q0, lq) : std::vector<double>{};
    const std::vector<double> kseg = p.has_segments && lk ? read(bwd::kv_segment_ids, k0, lk) : std::vector<double>{};
    const std::vector<std::int64_t> key_rows = lk ? sample_positions(lk, 8) : std::vector<std::int64_t>{};
    const std::vector<std::int64_t> query_rows = lq ? sample_positions(G * lq, 8) : std::vector<std::int64_t>{};
    std::vector<double> dk(static_cast<std::size_t>(key_rows.size() * D), 0.0), dv(dk.size(), 0.0);
    for (std::int64_t g = 0; g < G; ++g) {
      const std::int64_t h = kh * G + g;
      const std::vector<double> q = head_tokens(read, bwd::q, q0, lq, p.heads, h, D);
      const std::vector<double> dout = head_tokens(read, bwd::dout, q0, lq, p.heads, h, D);
      const std::int64_t bias0 = p.has_bias ? p.bias_index(b, h, 0, 0) : 0;
      const std::vector<double> bias = p.has_bias && lq ? read(bwd::bias, bias0, lq * p.seq_k) : std::vector<double>{};
      RefView rv{p, seq, q, k, v, bias, sinks, qseg, kseg};
      rv.q_t0 = q0, rv.q_h0 = h, rv.q_heads = 1;
      rv.k_t0 = k0, rv.k_h0 = kh, rv.k_heads = 1;
      rv.bias0 = bias0;
      auto go = [&](std::int64_t i, std::int64_t j) { return dout[static_cast<std::size_t>(i * D + j)]; };
      // dP = keep (dout . v) where P is not zero, as the full reference computes it.
      auto dp = [&](std::int64_t i, std::int64_t j, double keep) {
        double dpd = 0;
        for (std::int64_t d = 0; d < D; ++d) dpd += go(i, d) * rv.vv(k0 + j, kh, d);
        return dpd * keep;
      };
      auto keep_of = [&](std::int64_t i, std::int64_t j) { return rv.kept(b, h, i, j) ? keep_scale : 0.0; };
      // Every query row's lse and D = sum P dP: what the gradient of any key row needs. The
      // quadratic part, on every core.
      std::vector<double> lse(static_cast<std::size_t>(lq)), Di(static_cast<std::size_t>(lq), 0.0);
      for_parts(lq, 1, [&](std::int64_t, std::int64_t lo, std::int64_t hi) {
        for (std::int64_t i = lo; i < hi; ++i) {
          const Row w = row(rv, b, h, i);
          lse[static_cast<std::size_t>(i)] = w.lse;
          if (w.lse == -std::numeric_limits<double>::infinity()) continue;
          for (std::int64_t j = 0; j < lk; ++j)
            if (w.P[static_cast<std::size_t>(j)] != 0.0)
              Di[static_cast<std::size_t>(i)] += w.P[static_cast<std::size_t>(j)] * dp(i, j, keep_of(i, j));
        }
      });
      // du for query i and key j, its P (0 where masked or the row is empty), and its logit u.
      auto du_of = [&](std::int64_t i, std::int64_t j, double& P, double& keep) {
        P = 0;
        keep = 0;
        if (lse[static_cast<std::size_t>(i)] == -std::numeric_limits<double>::infinity() || !rv.allowed(b, i, j)) return 0.0;
        const double u = rv.logit(b, h, i, j);
        P = std::exp(rv.capped(u) - lse[static_cast<std::size_t>(i)]);
        if (P == 0.0) return 0.0;
        keep = keep_of(i, j);
        double du = P * (dp(i, j, keep) - Di[static_cast<std::size_t>(i)]);
        if (p.softcap > 0) {
          const double t = std::tanh(u / p.softcap);
          du *= 1.0 - t * t;
        }
        return du;
      };
      for (std::size_t x = 0; x < key_rows.size(); ++x) {
        const std::int64_t j = key_rows[x];
        for (std::int64_t i = 0; i < lq; ++i) {
          double P = 0, keep = 0;
          const double du = du_of(i, j, P, keep);
          if (P == 0.0) continue;
          for (std::int64_t d = 0; d < D; ++d) {
            dv[x * static_cast<std::size_t>(D) + static_cast<std::size_t>(d)] += P * keep * go(i, d);
            dk[x * static_cast<std::size_t>(D) + static_cast<std::size_t>(d)] += p.scale * du * rv.qv(q0 + i, h, d);
          }
        }
      }
      for (std::int64_t r : query_rows) {
        if (r / lq != g) continue;
        const std::int64_t i = r % lq, tq = q0 + i;
        std::vector<double> dq(static_cast<std::size_t>(D), 0.0);
        for (std::int64_t j = 0; j < lk; ++j) {
          double P = 0, keep = 0;
          const double du = du_of(i, j, P, keep);
          if (P == 0.0) continue;
          for (std::int64_t d = 0; d < D; ++d) dq[static_cast<std::size_t>(d)] += p.scale * du * rv.kv(k0 + j, kh, d);
        }
        for (std::int64_t d = 0; d < D; ++d) dqs.emplace_back((tq * p.heads + h) * D + d, dq[static_cast<std::size_t>(d)]);
        if (dbias_sampled)
          for (std::int64_t j : key_rows) {
            double P = 0, keep = 0;
            const double du = du_of(i, j, P, keep);
            dbs.emplace_back(p.bias_index(b, h, i, j), P == 0.0 ? 0.0 : du);
          }
      }
    }
    for (std::size_t x = 0; x < key_rows.size(); ++x)
      for (std::int64_t d = 0; d < D; ++d) {
        const std::int64_t at = ((k0 + key_rows[x]) * p.kv_heads + kh) * D + d;
        dks.emplace_back(at, dk[x * static_cast<std::size_t>(D) + static_cast<std::size_t>(d)]);
        dvs.emplace_back(at, dv[x * static_cast<std::size_t>(D) + static_cast<std::size_t>(d)]);
      }
  }
  return sampled_outputs({{bwd::dq, std::move(dqs)}, {bwd::dk, std::move(dks)}, {bwd::dv, std::move(dvs)}, {bwd::dbias, std::move(dbs)}});
}

double FlashAttentionBwdKernel::tolerance(const Invocation& inv) const {
  return gradient_tolerance_factor * base_tolerance(Problem::of(inv));
}

std::map<std::string, std::int64_t> example_sizes() {
  return {{"batch", 1}, {"seq", 2048}, {"heads", 16}, {"head_dim", 128}};
}

EJK_BUILTIN(kernels, "flash_attention") {
  r.add(std::make_shared<FlashAttentionKernel>());
  r.add(std::make_shared<FlashAttentionBwdKernel>());
}

}  // namespace ejk::kernels::flash_attention
