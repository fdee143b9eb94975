#include "block_sparse_attention/block_sparse_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "common/builtin.hpp"
#include "common/sampled.hpp"
#include "core/parts.hpp"
#include "ejk/error.hpp"
#include "ejk/registry.hpp"

namespace ejk::kernels::block_sparse_attention {

namespace {

const char* const forward_names[fwd::count] = {"q",   "k",   "v", "kv_block_counts", "kv_block_indices", "q_segment_ids",
                                               "kv_segment_ids", "out", "lse"};
const char* const backward_names[bwd::count] = {
    "q",         "k",         "v",  "out", "dout", "lse", "kv_block_counts", "kv_block_indices", "q_block_counts",
    "q_block_indices", "q_segment_ids", "kv_segment_ids", "dq", "dk", "dv"};

constexpr const char* option_names[] = {"block_q", "block_k", "causal", "logits_soft_cap", "local_blocks", "stride", "mask"};
constexpr const char* scalar_names[] = {"softmax_scale", "density"};

std::string describe(const char* name, const TensorSpec& s) {
  return std::string(name) + " " + to_string(s.shape) + " " + std::string(to_string(s.dtype));
}

template <std::size_t N>
std::string listing(const char* const (&names)[N]) {
  std::string s;
  for (const char* n : names) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

template <std::size_t N>
bool known(const char* const (&names)[N], const std::string& key) {
  return std::any_of(std::begin(names), std::end(names), [&](const char* n) { return key == n; });
}

void expect(const std::string& k, const char* name, const TensorSpec& s, const Shape& shape, DType t, const char* what) {
  if (s.shape != shape || s.dtype != t)
    throw InvalidArgument(k + ": " + describe(name, s) + " must be " + std::string(to_string(t)) + " " + to_string(shape) +
                          " (" + what + ")");
}

std::int64_t blocks(std::int64_t n, std::int64_t b) { return (n + b - 1) / b; }

// The key block holding the diagonal key of query block bi's last query; < 0 when none.
std::int64_t diag_block(const Pattern& pt, std::int64_t bi, std::int64_t seq_q, std::int64_t seq_k) {
  const std::int64_t last = std::min((bi + 1) * pt.block_q, seq_q) - 1 + seq_k - seq_q;
  return last < 0 ? -1 : last / pt.block_k;
}

bool pattern_live(const Pattern& pt, std::int64_t diag, std::int64_t bj) {
  const bool any = pt.local_blocks >= 0 || pt.stride > 0;
  if ((pt.causal || any) && bj > diag) return false;
  if (!any) return true;
  if (pt.local_blocks >= 0 && bj >= diag - pt.local_blocks) return true;
  return pt.stride > 0 && (diag - bj) % pt.stride == 0;
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

Layout build_layout(std::int64_t batch, std::int64_t heads, std::int64_t seq_q, std::int64_t seq_k, const Pattern& pt,
                    const Shape* mask_shape, std::span<const std::int64_t> mask) {
  const std::string k = "block_sparse_attention layout";
  if (pt.block_q <= 0 || pt.block_k <= 0)
    throw InvalidArgument(k + ": block_q " + std::to_string(pt.block_q) + " and block_k " + std::to_string(pt.block_k) +
                          " must be positive");
  if (pt.local_blocks < -1)
    throw InvalidArgument(k + ": local_blocks " + std::to_string(pt.local_blocks) + " must be >= 0 (or -1: off)");
  if (pt.stride < 0) throw InvalidArgument(k + ": stride " + std::to_string(pt.stride) + " must be >= 1 (or 0: off)");
  if (batch < 0 || heads <= 0 || seq_q < 0 || seq_k < 0)
    throw InvalidArgument(k + ": batch " + std::to_string(batch) + ", heads " + std::to_string(heads) + ", seq_q " +
                          std::to_string(seq_q) + ", seq_k " + std::to_string(seq_k) + " must be non-negative (heads positive)");
  Layout l;
  l.nbq = blocks(seq_q, pt.block_q);
  l.nbk = blocks(seq_k, pt.block_k);
  if (mask_shape) {
    const Shape& s = *mask_shape;
    const bool ok = s.size() == 4 && (s[0] == 1 || s[0] == batch) && (s[1] == 1 || s[1] == heads) && s[2] == l.nbq &&
                    s[3] == l.nbk;
    if (!ok)
      throw InvalidArgument(k + ": block_mask " + to_string(s) + " must be [batch " + std::to_string(batch) +
                            " or 1, heads " + std::to_string(heads) + " or 1, ceil(seq_q / block_q) = " +
                            std::to_string(l.nbq) + ", ceil(seq_k / block_k) = " + std::to_string(l.nbk) + "]");
    if (static_cast<std::int64_t>(mask.size()) != numel(s))
      throw InvalidArgument(k + ": block_mask " + to_string(s) + " has " + std::to_string(mask.size()) + " values");
    l.lb = s[0];
    l.lh = s[1];
  }
  const std::int64_t rows = l.lb * l.lh;
  l.kv_counts.assign(static_cast<std::size_t>(rows * l.nbq), 0);
  l.kv_indices.assign(static_cast<std::size_t>(rows * l.nbq * l.nbk), 0);
  l.q_counts.assign(static_cast<std::size_t>(rows * l.nbk), 0);
  l.q_indices.assign(static_cast<std::size_t>(rows * l.nbk * l.nbq), 0);
  const double copies = static_cast<double>(batch / l.lb) * static_cast<double>(heads / l.lh);
  const std::int64_t d = seq_k - seq_q;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t bi = 0; bi < l.nbq; ++bi) {
      const std::int64_t diag = diag_block(pt, bi, seq_q, seq_k);
      for (std::int64_t bj = 0; bj < l.nbk; ++bj) {
        bool live = pattern_live(pt, diag, bj);
        if (live && mask_shape) live = mask[static_cast<std::size_t>((r * l.nbq + bi) * l.nbk + bj)] != 0;
        if (!live) continue;
        auto& kc = l.kv_counts[static_cast<std::size_t>(r * l.nbq + bi)];
        l.kv_indices[static_cast<std::size_t>((r * l.nbq + bi) * l.nbk + kc++)] = static_cast<std::int32_t>(bj);
        auto& qc = l.q_counts[static_cast<std::size_t>(r * l.nbk + bj)];
        l.q_indices[static_cast<std::size_t>((r * l.nbk + bj) * l.nbq + qc++)] = static_cast<std::int32_t>(bi);
        const std::int64_t j0 = bj * pt.block_k, j1 = std::min(seq_k, j0 + pt.block_k);
        for (std::int64_t i = bi * pt.block_q; i < std::min(seq_q, (bi + 1) * pt.block_q); ++i) {
          const std::int64_t hi = pt.causal ? std::min(j1, i + d + 1) : j1;
          l.pairs += static_cast<double>(std::max<std::int64_t>(0, hi - j0)) * copies;
        }
      }
    }
  return l;
}

namespace {
Invocation make(const char* kernel, std::span<const TensorSpec> args, const Options& o) {
  Invocation inv;
  inv.kernel = kernel;
  inv.args.assign(args.begin(), args.end());
  inv.options = {{"block_q", o.block_q},           {"block_k", o.block_k},         {"causal", o.causal},
                 {"logits_soft_cap", o.logits_soft_cap}, {"local_blocks", o.local_blocks}, {"stride", o.stride},
                 {"mask", o.mask}};
  inv.scalars = nlohmann::json::object();
  if (o.softmax_scale != 0.0) inv.scalars["softmax_scale"] = o.softmax_scale;
  if (o.density != 1.0) inv.scalars["density"] = o.density;
  return inv;
}

void read_options(const Invocation& inv, const std::string& k, Problem& p) {
  for (const auto& [key, _] : inv.options.items())
    if (!known(option_names, key)) throw InvalidArgument(k + " has no option '" + key + "' (options: " + listing(option_names) + ")");
  for (const auto& [key, _] : inv.scalars.items())
    if (!known(scalar_names, key)) throw InvalidArgument(k + " has no scalar '" + key + "' (scalars: " + listing(scalar_names) + ")");
  auto integer = [&](const char* name, std::int64_t fallback, bool required) {
    if (!inv.options.contains(name)) {
      if (required) throw InvalidArgument(k + " needs option '" + std::string(name) + "' (the layout's block size)");
      return fallback;
    }
    const auto& v = inv.options.at(name);
    if (!v.is_number_integer()) throw InvalidArgument(k + " option '" + name + "' must be an integer, got " + v.dump());
    return v.get<std::int64_t>();
  };
  auto boolean = [&](const char* name) {
    if (!inv.options.contains(name)) return false;
    const auto& v = inv.options.at(name);
    if (!v.is_boolean()) throw InvalidArgument(k + " option '" + name + "' must be a boolean, got " + v.dump());
    return v.get<bool>();
  };
  auto number = [&](const nlohmann::json& from, const char* kind, const char* name, double fallback) {
    if (!from.contains(name)) return fallback;
    const auto& v = from.at(name);
    if (!v.is_number()) throw InvalidArgument(k + " " + kind + " '" + name + "' must be a number, got " + v.dump());
    const double x = v.get<double>();
    if (!std::isfinite(x)) throw InvalidArgument(k + " " + kind + " '" + name + "' must be finite, got " + v.dump());
    return x;
  };
  p.block_q = integer("block_q", 0, true);
  p.block_k = integer("block_k", 0, true);
  if (p.block_q <= 0 || p.block_k <= 0)
    throw InvalidArgument(k + ": block_q " + std::to_string(p.block_q) + " and block_k " + std::to_string(p.block_k) +
                          " must be positive");
  p.causal = boolean("causal");
  p.mask = boolean("mask");
  p.local_blocks = integer("local_blocks", -1, false);
  p.stride = integer("stride", 0, false);
  if (p.local_blocks < -1) throw InvalidArgument(k + ": local_blocks " + std::to_string(p.local_blocks) + " must be >= -1");
  if (p.stride < 0) throw InvalidArgument(k + ": stride " + std::to_string(p.stride) + " must be >= 0");
  p.softcap = number(inv.options, "option", "logits_soft_cap", 0.0);
  if (p.softcap < 0) throw InvalidArgument(k + ": logits_soft_cap " + std::to_string(p.softcap) + " must be >= 0 (0: off)");
  p.scale = number(inv.scalars, "scalar", "softmax_scale", 0.0);
  p.density = number(inv.scalars, "scalar", "density", 1.0);
  if (p.density < 0 || p.density > 1) throw InvalidArgument(k + ": density " + std::to_string(p.density) + " must lie in [0, 1]");
}
}  // namespace

Invocation forward_invocation(std::span<const TensorSpec> args, const Options& o) {
  return make("block_sparse_attention", args, o);
}
Invocation backward_invocation(std::span<const TensorSpec> args, const Options& o) {
  return make("block_sparse_attention_bwd", args, o);
}

Problem Problem::of(const Invocation& inv) {
  Problem p;
  p.backward = inv.kernel == "block_sparse_attention_bwd";
  const std::string k = p.backward ? "block_sparse_attention_bwd" : "block_sparse_attention";
  const std::size_t count = p.backward ? bwd::count : fwd::count;
  const char* const* names = p.backward ? backward_names : forward_names;
  if (inv.args.size() != count) {
    std::string list;
    for (std::size_t i = 0; i < count; ++i) list += (i ? ", " : "") + std::string(names[i]);
    throw InvalidArgument(k + " takes " + std::to_string(count) + " arguments (" + list + "), got " +
                          std::to_string(inv.args.size()));
  }
  read_options(inv, k, p);
  const std::size_t iq = 0, ik = 1, iv = 2;
  const std::size_t ic = p.backward ? bwd::kv_block_counts : fwd::kv_block_counts;
  const std::size_t isq = p.backward ? bwd::q_segment_ids : fwd::q_segment_ids;
  const TensorSpec &q = inv.args[iq], &kk = inv.args[ik], &v = inv.args[iv];
  if (q.shape.size() != 4 || !is_float(q.dtype))
    throw InvalidArgument(k + ": " + describe("q", q) + " must be a float [batch, seq_q, heads, head_dim]");
  p.batch = q.shape[0];
  p.seq_q = q.shape[1];
  p.heads = q.shape[2];
  p.head_dim = q.shape[3];
  p.dtype = q.dtype;
  if (kk.shape.size() != 4 || kk.shape[0] != p.batch || kk.shape[3] != p.head_dim || kk.dtype != p.dtype)
    throw InvalidArgument(k + ": " + describe("k", kk) + " must be " + std::string(to_string(p.dtype)) + " [" +
                          std::to_string(p.batch) + ", seq_k, kv_heads, " + std::to_string(p.head_dim) + "] (q is " +
                          describe("q", q) + ")");
  p.seq_k = kk.shape[1];
  p.kv_heads = kk.shape[2];
  expect(k, "v", v, kk.shape, p.dtype, "like k");
  if (p.heads <= 0 || p.kv_heads <= 0 || p.heads % p.kv_heads != 0)
    throw InvalidArgument(k + ": heads " + std::to_string(p.heads) + " (q " + to_string(q.shape) + ") must be a positive multiple of kv_heads " +
                          std::to_string(p.kv_heads) + " (k " + to_string(kk.shape) + ")");
  if (p.head_dim <= 0 || p.head_dim > max_head_dim)
    throw InvalidArgument(k + ": head_dim " + std::to_string(p.head_dim) + " must lie in 1 .. " + std::to_string(max_head_dim));
  if (p.scale == 0.0) p.scale = 1.0 / std::sqrt(static_cast<double>(p.head_dim));
  p.nbq = blocks(p.seq_q, p.block_q);
  p.nbk = blocks(p.seq_k, p.block_k);

  const TensorSpec& counts = inv.args[ic];
  const TensorSpec& indices = inv.args[ic + 1];
  if (counts.shape.size() != 3 || counts.dtype != DType::i32 || (counts.shape[0] != 1 && counts.shape[0] != p.batch) ||
      (counts.shape[1] != 1 && counts.shape[1] != p.heads) || counts.shape[2] != p.nbq)
    throw InvalidArgument(k + ": " + describe("kv_block_counts", counts) + " must be i32 [batch " + std::to_string(p.batch) +
                          " or 1, heads " + std::to_string(p.heads) + " or 1, ceil(seq_q / block_q) = " +
                          std::to_string(p.nbq) + "]");
  p.lb = counts.shape[0];
  p.lh = counts.shape[1];
  expect(k, "kv_block_indices", indices, {p.lb, p.lh, p.nbq, p.nbk}, DType::i32,
         "[lb, lh, ceil(seq_q / block_q), ceil(seq_k / block_k)], lb and lh as kv_block_counts");
  if (p.backward) {
    expect(k, "q_block_counts", inv.args[bwd::q_block_counts], {p.lb, p.lh, p.nbk}, DType::i32,
           "the layout transposed: [lb, lh, ceil(seq_k / block_k)]");
    expect(k, "q_block_indices", inv.args[bwd::q_block_indices], {p.lb, p.lh, p.nbk, p.nbq}, DType::i32,
           "the layout transposed: [lb, lh, ceil(seq_k / block_k), ceil(seq_q / block_q)]");
  }
  const TensorSpec &qs = inv.args[isq], &ks = inv.args[isq + 1];
  p.has_segments = !is_absent(qs) || !is_absent(ks);
  if (p.has_segments) {
    expect(k, "q_segment_ids", qs, {p.batch, p.seq_q}, DType::i32, "[batch, seq_q]; both segment ids or neither");
    expect(k, "kv_segment_ids", ks, {p.batch, p.seq_k}, DType::i32, "[batch, seq_k]; both segment ids or neither");
  }
  const Shape lse{p.batch, p.heads, p.seq_q};
  if (!p.backward) {
    expect(k, "out", inv.args[fwd::out], q.shape, p.dtype, "like q");
    expect(k, "lse", inv.args[fwd::lse], lse, DType::f32, "[batch, heads, seq_q]");
  } else {
    expect(k, "out", inv.args[bwd::out], q.shape, p.dtype, "the forward's output, like q");
    expect(k, "dout", inv.args[bwd::dout], q.shape, p.dtype, "like q");
    expect(k, "lse", inv.args[bwd::lse], lse, DType::f32, "the forward's log-sum-exp [batch, heads, seq_q]");
    expect(k, "dq", inv.args[bwd::dq], q.shape, p.dtype, "like q");
    expect(k, "dk", inv.args[bwd::dk], kk.shape, p.dtype, "like k");
    expect(k, "dv", inv.args[bwd::dv], kk.shape, p.dtype, "like v");
  }
  // Device kernels index with 32-bit integers.
  const double largest = static_cast<double>(std::max(p.seq_q * p.heads, p.seq_k * p.kv_heads)) *
                         static_cast<double>(p.batch) * static_cast<double>(p.head_dim);
  if (largest >= 2147483647.0 || static_cast<double>(p.lb * p.lh) * static_cast<double>(p.nbq) * static_cast<double>(p.nbk) >= 2147483647.0)
    throw InvalidArgument(k + ": q " + to_string(q.shape) + " or k " + to_string(kk.shape) +
                          " holds 2^31 elements or more; split the batch");
  return p;
}

void check_lists(const Problem& p, std::span<const std::int64_t> counts, std::span<const std::int64_t> indices,
                 bool transposed) {
  const std::int64_t rows = transposed ? p.nbk : p.nbq, width = transposed ? p.nbq : p.nbk;
  const char* cn = transposed ? "q_block_counts" : "kv_block_counts";
  const char* in = transposed ? "q_block_indices" : "kv_block_indices";
  for (std::int64_t r = 0; r < p.lb * p.lh * rows; ++r) {
    const std::int64_t c = counts[static_cast<std::size_t>(r)];
    if (c < 0 || c > width)
      throw InvalidArgument(std::string(cn) + " entry " + std::to_string(r) + " = " + std::to_string(c) + " must lie in 0 .. " +
                            std::to_string(width));
    for (std::int64_t e = 0; e < c; ++e) {
      const std::int64_t x = indices[static_cast<std::size_t>(r * width + e)];
      if (x < 0 || x >= width)
        throw InvalidArgument(std::string(in) + " entry " + std::to_string(r * width + e) + " = " + std::to_string(x) +
                              " is not a block (0 .. " + std::to_string(width - 1) + ")");
    }
  }
}

// ---- reference ----------------------------------------------------------------------------

namespace {

// Argument positions of what Head reads.
struct HeadArgs {
  std::size_t k, v, counts, qseg;
};
constexpr HeadArgs fwd_args{fwd::k, fwd::v, fwd::kv_block_counts, fwd::q_segment_ids};
constexpr HeadArgs bwd_args{bwd::k, bwd::v, bwd::kv_block_counts, bwd::q_segment_ids};

// One (sequence, kv head) as both references read it: the keys and values [seq_k][head_dim],
// the sequence's segment ids, and, for one of its query heads at a time, the key blocks each
// query block reaches.
struct Head {
  const Problem& p;
  HeadArgs at;
  std::int64_t b = 0;
  std::vector<double> k, v, qseg, kseg;  // segment ids: empty when not given
  std::vector<char> live;                // [nbq][nbk]

  Head(const Problem& problem, const ArgReader& read, HeadArgs args, std::int64_t sequence, std::int64_t kv_head)
      : p(problem), at(args), b(sequence) {
    const std::int64_t D = p.head_dim, row = p.kv_heads * D;
    k = row_slices(read, at.k, b * p.seq_k * row, row, p.seq_k, kv_head * D, D);
    v = row_slices(read, at.v, b * p.seq_k * row, row, p.seq_k, kv_head * D, D);
    if (p.has_segments) {
      qseg = read(at.qseg, b * p.seq_q, p.seq_q);
      kseg = read(at.qseg + 1, b * p.seq_k, p.seq_k);
    }
  }

  // Reads query head h's block lists: the rows of query blocks `rows`, or every row when null
  // (the others stay dead). Throws naming an entry out of range.
  void read_lists(const ArgReader& read, std::int64_t h, const std::vector<std::int64_t>* rows) {
    live.assign(static_cast<std::size_t>(p.nbq * p.nbk), 0);
    const std::int64_t first = p.list_row(b, h, p.nbq, 0);
    const std::vector<double> counts = read(at.counts, first, p.nbq);
    auto mark = [&](std::int64_t bi, const double* indices) {
      const auto c = static_cast<std::int64_t>(counts[static_cast<std::size_t>(bi)]);
      if (c < 0 || c > p.nbk)
        throw InvalidArgument("kv_block_counts entry " + std::to_string(first + bi) + " = " + std::to_string(c) +
                              " must lie in 0 .. " + std::to_string(p.nbk));
      for (std::int64_t e = 0; e < c; ++e) {
        const auto x = static_cast<std::int64_t>(indices[e]);
        if (x < 0 || x >= p.nbk)
          throw InvalidArgument("kv_block_indices entry " + std::to_string((first + bi) * p.nbk + e) + " = " +
                                std::to_string(x) + " is not a block (0 .. " + std::to_string(p.nbk - 1) + ")");
        live[static_cast<std::size_t>(bi * p.nbk + x)] = 1;
      }
    };
    if (!rows) {
      for_each_row(read, at.counts + 1, first * p.nbk, p.nbk, p.nbq, mark);
      return;
    }
    for (std::int64_t bi : *rows) {
      const auto c = std::clamp<std::int64_t>(static_cast<std::int64_t>(counts[static_cast<std::size_t>(bi)]), 0, p.nbk);
      const std::vector<double> indices = c ? read(at.counts + 1, (first + bi) * p.nbk, c) : std::vector<double>{};
      mark(bi, indices.data());
    }
  }

  const double* kr(std::int64_t j) const { return k.data() + j * p.head_dim; }
  const double* vr(std::int64_t j) const { return v.data() + j * p.head_dim; }

  bool allowed(std::int64_t i, std::int64_t j) const {
    if (!live[static_cast<std::size_t>((i / p.block_q) * p.nbk + j / p.block_k)]) return false;
    if (p.causal && j > i + p.seq_k - p.seq_q) return false;
    return !p.has_segments || qseg[static_cast<std::size_t>(i)] == kseg[static_cast<std::size_t>(j)];
  }
  // Logits u (before the cap) and probabilities of query i (its row q); returns the lse, -inf
  // when nothing is allowed.
  double row(const double* q, std::int64_t i, std::vector<double>& u, std::vector<double>& P) const {
    u.assign(static_cast<std::size_t>(p.seq_k), 0.0);
    P.assign(static_cast<std::size_t>(p.seq_k), 0.0);
    double mx = -std::numeric_limits<double>::infinity();
    std::vector<double> z(static_cast<std::size_t>(p.seq_k), -std::numeric_limits<double>::infinity());
    for (std::int64_t j = 0; j < p.seq_k; ++j) {
      if (!allowed(i, j)) continue;
      double s = 0;
      for (std::int64_t d = 0; d < p.head_dim; ++d) s += q[d] * kr(j)[d];
      s *= p.scale;
      u[static_cast<std::size_t>(j)] = s;
      const double zz = p.softcap > 0 ? p.softcap * std::tanh(s / p.softcap) : s;
      z[static_cast<std::size_t>(j)] = zz;
      mx = std::max(mx, zz);
    }
    if (mx == -std::numeric_limits<double>::infinity()) return mx;
    double sum = 0;
    for (std::int64_t j = 0; j < p.seq_k; ++j) sum += std::exp(z[static_cast<std::size_t>(j)] - mx);
    const double lse = mx + std::log(sum);
    for (std::int64_t j = 0; j < p.seq_k; ++j) P[static_cast<std::size_t>(j)] = std::exp(z[static_cast<std::size_t>(j)] - lse);
    return lse;
  }
  // out_i = sum_j P_j v_j.
  void output(const std::vector<double>& P, double* out) const {
    for (std::int64_t j = 0; j < p.seq_k; ++j) {
      const double pj = P[static_cast<std::size_t>(j)];
      if (pj == 0.0) continue;
      for (std::int64_t d = 0; d < p.head_dim; ++d) out[d] += pj * vr(j)[d];
    }
  }
  // The gradient of query i's logits, du (0 where P is), given its rows of q and dout; false
  // when the row has no allowed key. Every gradient follows: dq_i = scale sum_j du_j k_j,
  // dk_j += scale du_j q_i, dv_j += P_j dout_i.
  bool logit_grad(const double* q, const double* dout, std::int64_t i, std::vector<double>& P, std::vector<double>& du) const {
    std::vector<double> u;
    if (row(q, i, u, P) == -std::numeric_limits<double>::infinity()) return false;
    du.assign(static_cast<std::size_t>(p.seq_k), 0.0);
    double Di = 0;
    for (std::int64_t j = 0; j < p.seq_k; ++j) {
      const double pj = P[static_cast<std::size_t>(j)];
      if (pj == 0.0) continue;
      double s = 0;
      for (std::int64_t d = 0; d < p.head_dim; ++d) s += dout[d] * vr(j)[d];
      du[static_cast<std::size_t>(j)] = s;
      Di += pj * s;
    }
    for (std::int64_t j = 0; j < p.seq_k; ++j) {
      const double pj = P[static_cast<std::size_t>(j)];
      if (pj == 0.0) continue;
      double g = pj * (du[static_cast<std::size_t>(j)] - Di);
      if (p.softcap > 0) {
        const double t = std::tanh(u[static_cast<std::size_t>(j)] / p.softcap);
        g *= 1.0 - t * t;
      }
      du[static_cast<std::size_t>(j)] = g;
    }
    return true;
  }
};

Vars problem_vars(const Problem& p) {
  return {{"batch", p.batch},       {"seq_q", p.seq_q},       {"seq_k", p.seq_k},
          {"heads", p.heads},       {"kv_heads", p.kv_heads}, {"head_dim", p.head_dim},
          {"block_q", p.block_q},   {"block_k", p.block_k},   {"causal", std::int64_t{p.causal}},
          {"segments", std::int64_t{p.has_segments}},         {"softcap", std::int64_t{p.softcap > 0}},
          {"dtype", std::string(to_string(p.dtype))},         {"dtype_size", static_cast<std::int64_t>(dtype_size(p.dtype))}};
}

double useful_pairs(const Problem& p) {
  return static_cast<double>(p.batch) * static_cast<double>(p.heads) * static_cast<double>(p.seq_q) *
         static_cast<double>(p.seq_k) * p.density;
}

double base_tolerance(const Problem& p) {
  const double growth = std::sqrt(static_cast<double>(std::max(p.seq_k, p.head_dim)) / 256.0);
  return default_tolerance(p.dtype) * std::max(1.0, growth);
}

double list_bytes(const Problem& p, bool both) {
  const double rows = static_cast<double>(p.lb * p.lh);
  double b = rows * static_cast<double>(p.nbq) * (1.0 + static_cast<double>(p.nbk) * p.density) * 4;
  if (both) b *= 2;
  return b;
}

}  // namespace

void BlockSparseAttentionKernel::check(const Invocation& inv) const { (void)Problem::of(inv); }
Vars BlockSparseAttentionKernel::vars(const Invocation& inv) const { return problem_vars(Problem::of(inv)); }

double BlockSparseAttentionKernel::flops(const Invocation& inv) const {
  const Problem p = Problem::of(inv);
  return 4.0 * useful_pairs(p) * static_cast<double>(p.head_dim);
}

double BlockSparseAttentionKernel::bytes(const Invocation& inv) const {
  const Problem p = Problem::of(inv);
  const double e = static_cast<double>(dtype_size(p.dtype));
  const double qo = static_cast<double>(p.batch * p.seq_q * p.heads * p.head_dim) * 2;
  const double kv = static_cast<double>(p.batch * p.seq_k * p.kv_heads * p.head_dim) * 2 * std::max(p.density, 1.0 / static_cast<double>(std::max<std::int64_t>(1, p.nbk)));
  double extra = static_cast<double>(p.batch * p.heads * p.seq_q) * 4 + list_bytes(p, false);
  if (p.has_segments) extra += static_cast<double>(p.batch * (p.seq_q + p.seq_k)) * 4;
  return e * (qo + kv) + extra;
}

HostArrays BlockSparseAttentionKernel::reference(const Invocation& inv, const HostArrays& args) const {
  const Problem p = Problem::of(inv);
  const ArgReader read = host_reader(args);
  const std::int64_t D = p.head_dim;
  std::vector<double> out(static_cast<std::size_t>(p.batch * p.seq_q * p.heads * D), 0.0);
  std::vector<double> lse(static_cast<std::size_t>(p.batch * p.heads * p.seq_q), 0.0);
  std::vector<double> u, P;
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads; ++h) {
      Head r(p, read, fwd_args, b, h / p.group());
      r.read_lists(read, h, nullptr);
      for (std::int64_t i = 0; i < p.seq_q; ++i) {
        const std::int64_t at = ((b * p.seq_q + i) * p.heads + h) * D;
        lse[static_cast<std::size_t>((b * p.heads + h) * p.seq_q + i)] = r.row(args[fwd::q].data() + at, i, u, P);
        r.output(P, out.data() + at);
      }
    }
  return {std::move(out), std::move(lse)};
}

std::vector<SampledOutput> BlockSparseAttentionKernel::sampled_reference(const Invocation& inv, const ArgReader& read) const {
  const Problem p = Problem::of(inv);
  const std::int64_t D = p.head_dim, G = p.group();
  SampledPairs outs, lses;
  std::vector<double> u, P;
  // (sequence, kv head) pairs spread over both; in each, query rows spread over its query heads
  // and positions, each reading its own row of the block lists.
  for (std::int64_t pair : sample_positions(p.batch * p.kv_heads, 4)) {
    const std::int64_t b = pair / p.kv_heads, kh = pair % p.kv_heads;
    Head head(p, read, fwd_args, b, kh);
    for (std::int64_t r : sample_positions(G * p.seq_q, 8)) {
      const std::int64_t h = kh * G + r / p.seq_q, i = r % p.seq_q, at = ((b * p.seq_q + i) * p.heads + h) * D;
      const std::vector<std::int64_t> blocks{i / p.block_q};
      head.read_lists(read, h, &blocks);
      const std::vector<double> q = read(fwd::q, at, D);
      const double lse = head.row(q.data(), i, u, P);
      std::vector<double> o(static_cast<std::size_t>(D), 0.0);
      head.output(P, o.data());
      for (std::int64_t d = 0; d < D; ++d) outs.emplace_back(at + d, o[static_cast<std::size_t>(d)]);
      lses.emplace_back((b * p.heads + h) * p.seq_q + i, lse);
    }
  }
  return sampled_outputs({{fwd::out, std::move(outs)}, {fwd::lse, std::move(lses)}});
}

double BlockSparseAttentionKernel::tolerance(const Invocation& inv) const { return base_tolerance(Problem::of(inv)); }

void BlockSparseAttentionBwdKernel::check(const Invocation& inv) const { (void)Problem::of(inv); }
Vars BlockSparseAttentionBwdKernel::vars(const Invocation& inv) const { return problem_vars(Problem::of(inv)); }

double BlockSparseAttentionBwdKernel::flops(const Invocation& inv) const {
  const Problem p = Problem::of(inv);
  return 2.5 * 4.0 * useful_pairs(p) * static_cast<double>(p.head_dim);
}

double BlockSparseAttentionBwdKernel::bytes(const Invocation& inv) const {
  const Problem p = Problem::of(inv);
  const double e = static_cast<double>(dtype_size(p.dtype));
  const double qside = static_cast<double>(p.batch * p.seq_q * p.heads * p.head_dim) * 4;
  const double kside = static_cast<double>(p.batch * p.seq_k * p.kv_heads * p.head_dim) * 4;
  double extra = static_cast<double>(p.batch * p.heads * p.seq_q) * 4 + list_bytes(p, true);
  if (p.has_segments) extra += static_cast<double>(p.batch * (p.seq_q + p.seq_k)) * 4;
  return e * (qside + kside) + extra;
}

HostArrays BlockSparseAttentionBwdKernel::reference(const Invocation& inv, const HostArrays& args) const {
  const Problem p = Problem::of(inv);
  const ArgReader read = host_reader(args);
  std::vector<double> dq(args[bwd::q].size(), 0.0), dk(args[bwd::k].size(), 0.0), dv(args[bwd::v].size(), 0.0);
  std::vector<double> P, du;
  const std::int64_t D = p.head_dim;
  // Gradients of the exact forward from q, k, v and dout alone.
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads; ++h) {
      const std::int64_t hk = h / p.group();
      Head r(p, read, bwd_args, b, hk);
      r.read_lists(read, h, nullptr);
      for (std::int64_t i = 0; i < p.seq_q; ++i) {
        const std::int64_t qi = ((b * p.seq_q + i) * p.heads + h) * D;
        if (!r.logit_grad(args[bwd::q].data() + qi, args[bwd::dout].data() + qi, i, P, du)) continue;
        for (std::int64_t j = 0; j < p.seq_k; ++j) {
          const double pj = P[static_cast<std::size_t>(j)], g = du[static_cast<std::size_t>(j)];
          if (pj == 0.0) continue;
          const std::int64_t kj = ((b * p.seq_k + j) * p.kv_heads + hk) * D;
          for (std::int64_t d = 0; d < D; ++d) {
            dv[static_cast<std::size_t>(kj + d)] += pj * args[bwd::dout][static_cast<std::size_t>(qi + d)];
            dq[static_cast<std::size_t>(qi + d)] += p.scale * g * r.kr(j)[d];
            dk[static_cast<std::size_t>(kj + d)] += p.scale * g * args[bwd::q][static_cast<std::size_t>(qi + d)];
          }
        }
      }
    }
  return {std::move(dq), std::move(dk), std::move(dv)};
}

std::vector<SampledOutput> BlockSparseAttentionBwdKernel::sampled_reference(const Invocation& inv, const ArgReader& read) const {
  const Problem p = Problem::of(inv);
  const std::int64_t D = p.head_dim, G = p.group(), row = p.heads * D;
  SampledPairs dqs, dks, dvs;
  // (sequence, kv head) pairs; in each, 8 key rows of dk and dv, which every query of the
  // pair's query heads reaches, and 8 query rows of dq over those heads and positions.
  for (std::int64_t pair : sample_positions(p.batch * p.kv_heads, 2)) {
    const std::int64_t b = pair / p.kv_heads, kh = pair % p.kv_heads;
    const std::vector<std::int64_t> keys = sample_positions(p.seq_k, 8), queries = sample_positions(G * p.seq_q, 8);
    std::vector<double> dk(keys.size() * static_cast<std::size_t>(D), 0.0), dv(dk.size(), 0.0);
    Head r(p, read, bwd_args, b, kh);
    for (std::int64_t g = 0; g < G; ++g) {
      const std::int64_t h = kh * G + g;
      r.read_lists(read, h, nullptr);
      const std::vector<double> q = row_slices(read, bwd::q, b * p.seq_q * row, row, p.seq_q, h * D, D);
      const std::vector<double> dout = row_slices(read, bwd::dout, b * p.seq_q * row, row, p.seq_q, h * D, D);
      // Every query row's logit gradient: the quadratic part, on every core, each part adding
      // into its own dk and dv rows, summed after in order.
      std::vector<std::vector<double>> part_dk(host_threads(), std::vector<double>(dk.size(), 0.0)), part_dv = part_dk;
      for_parts(p.seq_q, 1, [&](std::int64_t part, std::int64_t lo, std::int64_t hi) {
        std::vector<double> P, du;
        auto& pdk = part_dk[static_cast<std::size_t>(part)];
        auto& pdv = part_dv[static_cast<std::size_t>(part)];
        for (std::int64_t i = lo; i < hi; ++i) {
          const double* qi = q.data() + i * D;
          const double* oi = dout.data() + i * D;
          if (!r.logit_grad(qi, oi, i, P, du)) continue;
          for (std::size_t x = 0; x < keys.size(); ++x) {
            const std::size_t j = static_cast<std::size_t>(keys[x]);
            if (P[j] == 0.0) continue;
            for (std::int64_t d = 0; d < D; ++d) {
              pdv[x * static_cast<std::size_t>(D) + static_cast<std::size_t>(d)] += P[j] * oi[d];
              pdk[x * static_cast<std::size_t>(D) + static_cast<std::size_t>(d)] += p.scale * du[j] * qi[d];
            }
          }
        }
      });
      for (std::size_t t = 0; t < part_dk.size(); ++t)
        for (std::size_t e = 0; e < dk.size(); ++e) {
          dk[e] += part_dk[t][e];
          dv[e] += part_dv[t][e];
        }
      std::vector<double> P, du;
      for (std::int64_t x : queries) {
        if (x / p.seq_q != g) continue;
        const std::int64_t i = x % p.seq_q;
        std::vector<double> dq(static_cast<std::size_t>(D), 0.0);
        if (r.logit_grad(q.data() + i * D, dout.data() + i * D, i, P, du))
          for (std::int64_t j = 0; j < p.seq_k; ++j) {
            if (P[static_cast<std::size_t>(j)] == 0.0) continue;
            for (std::int64_t d = 0; d < D; ++d) dq[static_cast<std::size_t>(d)] += p.scale * du[static_cast<std::size_t>(j)] * r.kr(j)[d];
          }
        for (std::int64_t d = 0; d < D; ++d) dqs.emplace_back(((b * p.seq_q + i) * p.heads + h) * D + d, dq[static_cast<std::size_t>(d)]);
      }
    }
    for (std::size_t x = 0; x < keys.size(); ++x)
      for (std::int64_t d = 0; d < D; ++d) {
        const std::int64_t at = ((b * p.seq_k + keys[x]) * p.kv_heads + kh) * D + d;
        dks.emplace_back(at, dk[x * static_cast<std::size_t>(D) + static_cast<std::size_t>(d)]);
        dvs.emplace_back(at, dv[x * static_cast<std::size_t>(D) + static_cast<std::size_t>(d)]);
      }
  }
  return sampled_outputs({{bwd::dq, std::move(dqs)}, {bwd::dk, std::move(dks)}, {bwd::dv, std::move(dvs)}});
}

double BlockSparseAttentionBwdKernel::tolerance(const Invocation& inv) const {
  // dz = P (dP - D) cancels where dP is close to its row mean; the saved out and lse enter
  // already rounded (as flash_attention_bwd).
  return 4.0 * base_tolerance(Problem::of(inv));
}

// ---- workloads ----------------------------------------------------------------------------

std::vector<std::string> recipe_sizes() { return {"seq", "heads", "head_dim", "batch", "kv_heads", "seq_q", "seq_k"}; }

Layout workload_layout(const Problem& p) {
  const std::int64_t lb = p.mask ? p.batch : 1, lh = p.mask ? p.heads : 1;
  if (static_cast<double>(lb) * static_cast<double>(lh) * static_cast<double>(p.nbq) * static_cast<double>(p.nbk) >
      static_cast<double>(max_layout_blocks))
    throw InvalidArgument("block_sparse_attention: a layout of " + std::to_string(lb) + " x " + std::to_string(lh) +
                          " x " + std::to_string(p.nbq) + " x " + std::to_string(p.nbk) +
                          " block pairs is more than the " + std::to_string(max_layout_blocks) +
                          " whose block lists are built on the host (seq_q / block_q x seq_k / block_k, per batch and "
                          "head when mask is on)");
  if (!p.mask) return build_layout(p.batch, p.heads, p.seq_q, p.seq_k, p.pattern());
  // A fixed draw, so that the density recorded in the invocation is the one the inputs have.
  std::mt19937_64 rng(0x5eed);
  const Shape s{p.batch, p.heads, p.nbq, p.nbk};
  std::vector<std::int64_t> m(static_cast<std::size_t>(numel(s)));
  for (auto& x : m) x = static_cast<std::int64_t>(rng() >> 63);
  return build_layout(p.batch, p.heads, p.seq_q, p.seq_k, p.pattern(), &s, m);
}

Invocation recipe_invocation(bool backward, const std::map<std::string, std::int64_t>& sizes, DType dtype,
                             const nlohmann::json& options) {
  const std::string k = backward ? "block_sparse_attention_bwd" : "block_sparse_attention";
  const char* size_list = "seq (or seq_q and seq_k), heads, head_dim; optional batch, kv_heads";
  const char* option_list =
      "block_q, block_k, causal, local_blocks, stride, mask, logits_soft_cap, softmax_scale, segments";
  const RecipeSizes size(k, sizes, recipe_sizes(), size_list);
  const bool both = sizes.count("seq_q") && sizes.count("seq_k");
  const std::int64_t seq = both ? 0 : size("seq", -1);
  const std::int64_t batch = size("batch", 1), heads = size("heads", -1), dim = size("head_dim", -1);
  const std::int64_t kv_heads = size("kv_heads", heads), sq = size("seq_q", seq), sk = size("seq_k", seq);
  Options o;
  o.block_q = o.block_k = 64;
  bool segments = false;
  for (const auto& item : options.items()) {
    const std::string& key = item.key();  // names lambdas can capture (Clang < 16: no bindings)
    const nlohmann::json& v = item.value();
    auto want = [&](bool ok, const char* what) {
      if (!ok) throw InvalidArgument(k + " option '" + key + "' must be " + what + ", got " + v.dump());
    };
    if (key == "block_q") { want(v.is_number_integer(), "an integer"); o.block_q = v.get<std::int64_t>(); }
    else if (key == "block_k") { want(v.is_number_integer(), "an integer"); o.block_k = v.get<std::int64_t>(); }
    else if (key == "causal") { want(v.is_boolean(), "a boolean"); o.causal = v.get<bool>(); }
    else if (key == "local_blocks") { want(v.is_number_integer(), "an integer"); o.local_blocks = v.get<std::int64_t>(); }
    else if (key == "stride") { want(v.is_number_integer(), "an integer"); o.stride = v.get<std::int64_t>(); }
    else if (key == "mask") { want(v.is_boolean(), "a boolean"); o.mask = v.get<bool>(); }
    else if (key == "logits_soft_cap") { want(v.is_number(), "a number"); o.logits_soft_cap = v.get<double>(); }
    else if (key == "softmax_scale") { want(v.is_number(), "a number"); o.softmax_scale = v.get<double>(); }
    else if (key == "segments") { want(v.is_boolean(), "a boolean"); segments = v.get<bool>(); }
    else throw InvalidArgument(k + " has no option '" + key + "' (options: " + option_list + ")");
  }
  if (o.block_q <= 0 || o.block_k <= 0)
    throw InvalidArgument(k + ": block_q " + std::to_string(o.block_q) + " and block_k " + std::to_string(o.block_k) +
                          " must be positive");
  const std::int64_t nbq = blocks(sq, o.block_q), nbk = blocks(sk, o.block_k);
  const std::int64_t lb = o.mask ? batch : 1, lh = o.mask ? heads : 1;
  const TensorSpec q{{batch, sq, heads, dim}, dtype}, kv{{batch, sk, kv_heads, dim}, dtype};
  const TensorSpec kc{{lb, lh, nbq}, DType::i32}, ki{{lb, lh, nbq, nbk}, DType::i32};
  const TensorSpec qc{{lb, lh, nbk}, DType::i32}, qi{{lb, lh, nbk, nbq}, DType::i32};
  TensorSpec qs = absent(), ks = absent();
  if (segments) qs = {{batch, sq}, DType::i32}, ks = {{batch, sk}, DType::i32};
  const TensorSpec lse{{batch, heads, sq}, DType::f32};
  Invocation inv;
  {
    const TensorSpec args[] = {q, kv, kv, kc, ki, qs, ks, q, lse};
    inv = forward_invocation(args, o);
  }
  Registry::global().kernel(inv.kernel).validate(inv);  // throws with the argument named
  const Problem p = Problem::of(inv);
  const double all = static_cast<double>(batch * heads) * static_cast<double>(sq) * static_cast<double>(sk);
  o.density = all > 0 ? workload_layout(p).pairs / all : 1.0;
  if (!backward) {
    const TensorSpec args[] = {q, kv, kv, kc, ki, qs, ks, q, lse};
    inv = forward_invocation(args, o);
  } else {
    const TensorSpec args[] = {q, kv, kv, q, q, lse, kc, ki, qc, qi, qs, ks, q, kv, kv};
    inv = backward_invocation(args, o);
  }
  Registry::global().kernel(inv.kernel).validate(inv);
  return inv;
}

Invocation BlockSparseAttentionKernel::from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                                                  const nlohmann::json& options) const {
  return recipe_invocation(false, sizes, dtype, options);
}
Invocation BlockSparseAttentionBwdKernel::from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                                                     const nlohmann::json& options) const {
  return recipe_invocation(true, sizes, dtype, options);
}

namespace {
// Two runs of segment ids per sequence.
std::vector<double> segment_runs(std::int64_t batch, std::int64_t len) {
  std::vector<double> ids;
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t i = 0; i < len; ++i) ids.push_back(static_cast<double>(2 * i / std::max<std::int64_t>(1, len)));
  return ids;
}

std::vector<double> doubles(const std::vector<std::int32_t>& v) { return {v.begin(), v.end()}; }

std::vector<Fill> fill(const Invocation& inv, const std::vector<ArgDef>& defs, std::size_t counts, std::size_t qcounts,
                       std::size_t qseg) {
  const Problem p = Problem::of(inv);
  std::vector<Fill> a = standard_fills(inv, defs);
  Layout l = workload_layout(p);
  if (l.lb != p.lb || l.lh != p.lh)
    throw InvalidArgument(inv.kernel + ": the block lists " + to_string(inv.args[counts].shape) +
                          " do not broadcast as the workload's layout does ([" + std::to_string(l.lb) + ", " +
                          std::to_string(l.lh) + ", ...])");
  a[counts] = Fill::of(doubles(l.kv_counts));
  a[counts + 1] = Fill::of(doubles(l.kv_indices));
  if (qcounts) {
    a[qcounts] = Fill::of(doubles(l.q_counts));
    a[qcounts + 1] = Fill::of(doubles(l.q_indices));
  }
  if (p.has_segments) {
    a[qseg] = Fill::of(segment_runs(p.batch, p.seq_q));
    a[qseg + 1] = Fill::of(segment_runs(p.batch, p.seq_k));
  }
  return a;
}
}  // namespace

std::vector<Fill> BlockSparseAttentionKernel::fills(const Invocation& inv, std::uint64_t /*seed*/) const {
  return fill(inv, args(), fwd::kv_block_counts, 0, fwd::q_segment_ids);
}

std::vector<Fill> BlockSparseAttentionBwdKernel::fills(const Invocation& inv, std::uint64_t /*seed*/) const {
  std::vector<Fill> a = fill(inv, args(), bwd::kv_block_counts, bwd::q_block_counts, bwd::q_segment_ids);
  a[bwd::out] = a[bwd::lse] = Fill::none();  // derive() computes them
  return a;
}

void BlockSparseAttentionBwdKernel::derive(const Invocation& inv, std::span<const Tensor> args) const {
  // out and lse must be the forward's for these q, k, v.
  const std::size_t from[] = {bwd::q,           bwd::k,             bwd::v,   bwd::kv_block_counts, bwd::kv_block_indices,
                              bwd::q_segment_ids, bwd::kv_segment_ids, bwd::out, bwd::lse};
  run_on("block_sparse_attention", inv, args, from);
}

EJK_BUILTIN(kernels, "block_sparse_attention") {
  r.add(std::make_shared<BlockSparseAttentionKernel>());
  r.add(std::make_shared<BlockSparseAttentionBwdKernel>());
}

}  // namespace ejk::kernels::block_sparse_attention
