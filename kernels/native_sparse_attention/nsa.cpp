#include "native_sparse_attention/nsa.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>

#include "common/builtin.hpp"
#include "common/sampled.hpp"
#include "core/parts.hpp"
#include "ejk/error.hpp"
#include "ejk/registry.hpp"

namespace ejk::kernels::native_sparse_attention {

namespace {

const char* const fwd_names[fwd::count] = {"q",          "k",          "v", "g_cmp", "g_slc", "block_indices",
                                           "block_counts", "cu_seqlens", "o", "o_cmp", "o_slc", "lse"};
const char* const bwd_names[bwd::count] = {"q",     "k",     "v",   "g_cmp", "g_slc", "block_indices",
                                           "block_counts", "cu_seqlens", "o_cmp", "o_slc", "lse", "do",
                                           "dq",    "dk",    "dv",  "dg_cmp", "dg_slc"};

std::size_t z(std::int64_t i) { return static_cast<std::size_t>(i); }

}  // namespace

std::vector<ArgDef> forward_args() {
  std::vector<ArgDef> a;
  for (std::size_t i = 0; i < fwd::count; ++i) a.push_back({fwd_names[i], i >= fwd::o ? Role::out : Role::in});
  return a;
}

std::vector<ArgDef> backward_args() {
  std::vector<ArgDef> a;
  for (std::size_t i = 0; i < bwd::count; ++i) a.push_back({bwd_names[i], i >= bwd::dq ? Role::out : Role::in});
  return a;
}

Problem Problem::of(const Invocation& inv) {
  Problem p;
  p.backward = inv.kernel == "native_sparse_attention_bwd";
  const std::string kname = p.backward ? "native_sparse_attention_bwd" : "native_sparse_attention";
  const char* const* names = p.backward ? bwd_names : fwd_names;
  const std::size_t count = p.backward ? bwd::count : fwd::count;
  if (inv.args.size() != count) {
    std::string list;
    for (std::size_t i = 0; i < count; ++i) list += (i ? ", " : "") + std::string(names[i]);
    throw InvalidArgument(kname + " takes " + std::to_string(count) + " arguments (" + list + "), got " +
                          std::to_string(inv.args.size()));
  }
  for (const auto& [key, v] : inv.options.items()) {
    if (key != "block_size") throw InvalidArgument(kname + " has no option '" + key + "' (options: block_size)");
    if (!v.is_number_integer() || v.get<std::int64_t>() <= 0)
      throw InvalidArgument(kname + " option 'block_size' must be a positive integer, got " + v.dump());
    p.block_size = v.get<std::int64_t>();
  }
  if (p.block_size == 0) throw InvalidArgument(kname + " needs option 'block_size' (the sparse block size)");
  for (const auto& [key, v] : inv.scalars.items()) {
    if (key != "scale") throw InvalidArgument(kname + " has no scalar '" + key + "' (scalars: scale)");
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() == 0.0)
      throw InvalidArgument(kname + " scalar 'scale' must be a finite non-zero number, got " + v.dump());
    p.scale = v.get<double>();
  }
  const auto& a = inv.args;
  auto describe = [&](std::size_t i) {
    return std::string(names[i]) + " " + to_string(a[i].shape) + " " + std::string(to_string(a[i].dtype));
  };
  const std::size_t iq = 0, ik = 1, iv = 2, ibi = fwd::block_indices, icu = fwd::cu_seqlens;
  if (a[iq].shape.size() != 4)
    throw InvalidArgument(kname + ": " + describe(iq) + " must be [batch, seq, heads, head_dim_k]");
  if (a[ik].shape.size() != 4)
    throw InvalidArgument(kname + ": " + describe(ik) + " must be [batch, seq, kv_heads, head_dim_k]");
  if (a[iv].shape.size() != 4)
    throw InvalidArgument(kname + ": " + describe(iv) + " must be [batch, seq, kv_heads, head_dim_v]");
  if (a[ibi].shape.size() != 4)
    throw InvalidArgument(kname + ": " + describe(ibi) + " must be i32 [batch, seq, kv_heads, selected]");
  if (a[icu].shape.size() != 1 || a[icu].shape[0] < 2)
    throw InvalidArgument(kname + ": " + describe(icu) + " must be i32 [num_seqs + 1] with at least one sequence");
  p.dtype = a[iq].dtype;
  if (p.dtype != DType::f32 && p.dtype != DType::f16 && p.dtype != DType::bf16)
    throw InvalidArgument(kname + ": " + describe(iq) + " must be f32, f16 or bf16");
  p.batch = a[iq].shape[0];
  p.seq = a[iq].shape[1];
  p.heads = a[iq].shape[2];
  p.dk = a[iq].shape[3];
  p.kv_heads = a[ik].shape[2];
  p.dv = a[iv].shape[3];
  p.selected = a[ibi].shape[3];
  p.num_seqs = a[icu].shape[0] - 1;
  if (p.batch < 0 || p.seq < 0 || p.heads <= 0 || p.dk <= 0)
    throw InvalidArgument(kname + ": " + describe(iq) + " needs heads and head_dim_k of at least 1");
  if (p.kv_heads <= 0 || p.heads % p.kv_heads != 0)
    throw InvalidArgument(kname + ": " + describe(ik) + " must have kv_heads dividing the " + std::to_string(p.heads) +
                          " query heads of q");
  if (p.dv <= 0) throw InvalidArgument(kname + ": " + describe(iv) + " needs head_dim_v of at least 1");
  if (p.selected <= 0) throw InvalidArgument(kname + ": " + describe(ibi) + " needs at least one selected block");
  // Device kernels keep a head's query, value and accumulator rows in local memory.
  if (p.dk > 256 || p.dv > 256)
    throw InvalidArgument(kname + ": head_dim_k " + std::to_string(p.dk) + " and head_dim_v " + std::to_string(p.dv) +
                          " must be at most 256");
  p.group = p.heads / p.kv_heads;
  auto expect = [&](std::size_t i, Shape want, DType t, const char* layout) {
    if (a[i].shape != want || a[i].dtype != t)
      throw InvalidArgument(kname + ": " + describe(i) + " must be " + std::string(to_string(t)) + " " + to_string(want) +
                            " (" + layout + ")");
  };
  const std::int64_t B = p.batch, T = p.seq, HQ = p.heads, H = p.kv_heads;
  expect(ik, {B, T, H, p.dk}, p.dtype, "[batch, seq, kv_heads, head_dim_k], like q");
  expect(iv, {B, T, H, p.dv}, p.dtype, "[batch, seq, kv_heads, head_dim_v], like k");
  expect(fwd::g_cmp, {B, T, HQ}, p.dtype, "[batch, seq, heads], like q");
  expect(fwd::g_slc, {B, T, HQ}, p.dtype, "[batch, seq, heads], like q");
  expect(ibi, {B, T, H, p.selected}, DType::i32, "[batch, seq, kv_heads, selected]");
  expect(fwd::block_counts, {B, T, H}, DType::i32, "[batch, seq, kv_heads]");
  expect(icu, {p.num_seqs + 1}, DType::i32, "[num_seqs + 1]");
  if (!p.backward) {
    expect(fwd::o, {B, T, HQ, p.dv}, p.dtype, "[batch, seq, heads, head_dim_v]");
    expect(fwd::o_cmp, {B, T, HQ, p.dv}, p.dtype, "[batch, seq, heads, head_dim_v]");
    expect(fwd::o_slc, {B, T, HQ, p.dv}, p.dtype, "[batch, seq, heads, head_dim_v]");
    expect(fwd::lse, {B, T, HQ, 2}, DType::f32, "[batch, seq, heads, 2]: compression, selection");
  } else {
    expect(bwd::o_cmp, {B, T, HQ, p.dv}, p.dtype, "[batch, seq, heads, head_dim_v], the forward's");
    expect(bwd::o_slc, {B, T, HQ, p.dv}, p.dtype, "[batch, seq, heads, head_dim_v], the forward's");
    expect(bwd::lse, {B, T, HQ, 2}, DType::f32, "[batch, seq, heads, 2], the forward's");
    expect(bwd::dout, {B, T, HQ, p.dv}, p.dtype, "[batch, seq, heads, head_dim_v]");
    expect(bwd::dq, {B, T, HQ, p.dk}, p.dtype, "like q");
    expect(bwd::dk, {B, T, H, p.dk}, p.dtype, "like k");
    expect(bwd::dv, {B, T, H, p.dv}, p.dtype, "like v");
    expect(bwd::dg_cmp, {B, T, HQ}, p.dtype, "like g_cmp");
    expect(bwd::dg_slc, {B, T, HQ}, p.dtype, "like g_slc");
  }
  // Device kernels index with 32-bit integers.
  const double most = static_cast<double>(p.tokens()) * static_cast<double>(std::max({HQ * std::max(p.dk, p.dv), H * p.selected}));
  if (most >= 2147483647.0) throw InvalidArgument(kname + ": " + describe(iq) + " holds 2^31 elements or more");
  if (p.scale == 0.0) p.scale = 1.0 / std::sqrt(static_cast<double>(p.dk));
  return p;
}

namespace {
Invocation make(const char* name, std::span<const TensorSpec> args, std::int64_t block_size, double scale) {
  Invocation inv;
  inv.kernel = name;
  inv.args.assign(args.begin(), args.end());
  inv.options["block_size"] = block_size;
  if (scale != 0.0) inv.scalars["scale"] = scale;
  return inv;
}
}  // namespace

Invocation forward_invocation(std::span<const TensorSpec> args, std::int64_t block_size, double scale) {
  return make("native_sparse_attention", args, block_size, scale);
}
Invocation backward_invocation(std::span<const TensorSpec> args, std::int64_t block_size, double scale) {
  return make("native_sparse_attention_bwd", args, block_size, scale);
}

namespace {
std::string kernel_name(const Problem& p) { return p.backward ? "native_sparse_attention_bwd" : "native_sparse_attention"; }
}  // namespace

void check_cu_seqlens(const Problem& p, std::span<const std::int64_t> cu) {
  const std::string kname = kernel_name(p);
  if (cu[0] != 0) throw InvalidArgument(kname + ": cu_seqlens[0] = " + std::to_string(cu[0]) + " must be 0");
  for (std::int64_t n = 0; n < p.num_seqs; ++n)
    if (cu[z(n + 1)] < cu[z(n)])
      throw InvalidArgument(kname + ": cu_seqlens[" + std::to_string(n + 1) + "] = " + std::to_string(cu[z(n + 1)]) +
                            " is less than cu_seqlens[" + std::to_string(n) + "] = " + std::to_string(cu[z(n)]));
  if (cu[z(p.num_seqs)] != p.tokens())
    throw InvalidArgument(kname + ": cu_seqlens[" + std::to_string(p.num_seqs) + "] = " +
                          std::to_string(cu[z(p.num_seqs)]) + " must be batch * seq = " + std::to_string(p.tokens()));
}

void check_selection(const Problem& p, std::int64_t t, std::int64_t h, std::int64_t count,
                     std::span<const std::int64_t> entries, std::int64_t len) {
  const std::string kname = kernel_name(p);
  auto where = [&](std::int64_t i) {
    std::string s = "[" + std::to_string(t / std::max<std::int64_t>(1, p.seq)) + ", " +
                    std::to_string(t % std::max<std::int64_t>(1, p.seq)) + ", " + std::to_string(h);
    return i < 0 ? s + "]" : s + ", " + std::to_string(i) + "]";
  };
  if (count < 0 || count > p.selected)
    throw InvalidArgument(kname + ": block_counts" + where(-1) + " = " + std::to_string(count) + " is outside [0, " +
                          std::to_string(p.selected) + "] (selected)");
  const std::int64_t blocks = (len + p.block_size - 1) / p.block_size;
  for (std::int64_t i = 0; i < count; ++i) {
    const std::int64_t e = entries[z(i)];
    if (e >= blocks)
      throw InvalidArgument(kname + ": block_indices" + where(i) + " = " + std::to_string(e) +
                            " is not a block of its sequence of " + std::to_string(len) + " tokens (" +
                            std::to_string(blocks) + " blocks of " + std::to_string(p.block_size) + ")");
  }
}

void check_indices(const Problem& p, std::span<const std::int64_t> bi, std::span<const std::int64_t> bc,
                   std::span<const std::int64_t> cu) {
  check_cu_seqlens(p, cu);
  const auto place = places(p, cu);
  const std::int64_t H = p.kv_heads, S = p.selected;
  for (std::int64_t t = 0; t < p.tokens(); ++t)
    for (std::int64_t h = 0; h < H; ++h)
      check_selection(p, t, h, bc[z(t * H + h)], bi.subspan(z((t * H + h) * S), z(S)), place[z(t)].eos - place[z(t)].bos);
}

std::vector<Place> places(const Problem& p, std::span<const std::int64_t> cu) {
  std::vector<Place> out(z(p.tokens()));
  for (std::int64_t n = 0; n < p.num_seqs; ++n)
    for (std::int64_t t = cu[z(n)]; t < cu[z(n + 1)] && t < p.tokens(); ++t)
      out[z(t)] = {cu[z(n)], cu[z(n + 1)], t - cu[z(n)]};
  return out;
}

namespace {

std::vector<std::int64_t> ints(const std::vector<double>& v) { return {v.begin(), v.end()}; }

// One (sequence, kv head) as both references read it: its keys and values, and their means
// over each whole block (the compressed keys), positions relative to the sequence's start.
struct Pair {
  const Problem& p;
  std::int64_t bos = 0, len = 0, h = 0;
  std::vector<double> k, v;    // [len][dk], [len][dv]
  std::vector<double> kc, vc;  // [len / block_size][dk], [..][dv]

  Pair(const Problem& problem, const ArgReader& read, std::int64_t first, std::int64_t tokens, std::int64_t kv_head)
      : p(problem), bos(first), len(tokens), h(kv_head) {
    const std::int64_t H = p.kv_heads, K = p.dk, V = p.dv, BS = p.block_size;
    k = row_slices(read, fwd::k, bos * H * K, H * K, len, h * K, K);
    v = row_slices(read, fwd::v, bos * H * V, H * V, len, h * V, V);
    kc.assign(z(len / BS * K), 0.0);
    vc.assign(z(len / BS * V), 0.0);
    for (std::int64_t j = 0; j < len / BS * BS; ++j) {
      const std::int64_t c = j / BS;
      for (std::int64_t d = 0; d < K; ++d) kc[z(c * K + d)] += k[z(j * K + d)] / static_cast<double>(BS);
      for (std::int64_t d = 0; d < V; ++d) vc[z(c * V + d)] += v[z(j * V + d)] / static_cast<double>(BS);
    }
  }
};

// The gradients of a pair's keys and values, and of its compressed ones.
struct KeyGrads {
  std::vector<double> dk, dv, dkc, dvc;
  explicit KeyGrads(const Pair& r)
      : dk(r.k.size(), 0.0), dv(r.v.size(), 0.0), dkc(r.kc.size(), 0.0), dvc(r.vc.size(), 0.0) {}
  void add(const KeyGrads& o) {
    for (std::size_t i = 0; i < dk.size(); ++i) dk[i] += o.dk[i];
    for (std::size_t i = 0; i < dv.size(); ++i) dv[i] += o.dv[i];
    for (std::size_t i = 0; i < dkc.size(); ++i) dkc[i] += o.dkc[i];
    for (std::size_t i = 0; i < dvc.size(); ++i) dvc[i] += o.dvc[i];
  }
  // Mean pooling: every key of a whole block gets 1/block_size of the block's gradient.
  double key(const Problem& p, std::int64_t j, std::int64_t d) const {
    const std::size_t c = z(j / p.block_size);
    const double pooled = c < dkc.size() / z(p.dk) ? dkc[c * z(p.dk) + z(d)] / static_cast<double>(p.block_size) : 0.0;
    return dk[z(j * p.dk + d)] + pooled;
  }
  double value(const Problem& p, std::int64_t j, std::int64_t d) const {
    const std::size_t c = z(j / p.block_size);
    const double pooled = c < dvc.size() / z(p.dv) ? dvc[c * z(p.dv) + z(d)] / static_cast<double>(p.block_size) : 0.0;
    return dv[z(j * p.dv + d)] + pooled;
  }
};

// One query row of a pair: the token at position pos, query head g of the group.
struct Query {
  std::int64_t pos = 0;
  const double* q = nullptr;           // dk values
  std::span<const std::int64_t> sel;   // its kv head's block_counts entries of block_indices
  double g_cmp = 0, g_slc = 0;
  const double* dout = nullptr;        // dv values; null: forward only
};

// What one query row gives: each branch's output and lse; with dout, the gate gradients and dq.
struct QueryOut {
  std::vector<double> o_cmp, o_slc, dq;
  double lse[2] = {-std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()};
  double dg[2] = {0, 0};
};

// Both branches of one query row, and given its dout their gradients, which add into `grads`
// (the pair's keys' and compressed keys').
QueryOut attend(const Pair& r, const Query& x, KeyGrads* grads) {
  const Problem& p = r.p;
  const std::int64_t K = p.dk, V = p.dv, BS = p.block_size;
  QueryOut out;
  out.o_cmp.assign(z(V), 0.0);
  out.o_slc.assign(z(V), 0.0);
  if (x.dout) out.dq.assign(z(K), 0.0);
  std::vector<std::int64_t> keys;
  std::vector<double> s;
  for (int branch = 0; branch < 2; ++branch) {
    // Rows of the compressed keys (blocks wholly in the past) or of the keys (the selected
    // blocks' keys up to pos; an entry given twice counts twice).
    keys.clear();
    if (branch == 0) {
      for (std::int64_t c = 0; c < (x.pos + 1) / BS; ++c) keys.push_back(c);
    } else {
      for (std::int64_t e : x.sel) {
        if (e < 0 || e * BS > x.pos) continue;
        for (std::int64_t j = e * BS; j < std::min((e + 1) * BS, x.pos + 1); ++j) keys.push_back(j);
      }
    }
    if (keys.empty()) continue;
    const double* kb = branch == 0 ? r.kc.data() : r.k.data();
    const double* vb = branch == 0 ? r.vc.data() : r.v.data();
    std::vector<double>& ob = branch == 0 ? out.o_cmp : out.o_slc;
    s.assign(keys.size(), 0.0);
    double mx = -std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < keys.size(); ++j) {
      double acc = 0;
      for (std::int64_t d = 0; d < K; ++d) acc += x.q[d] * kb[keys[j] * K + d];
      s[j] = acc * p.scale;
      mx = std::max(mx, s[j]);
    }
    double sum = 0;
    for (double e : s) sum += std::exp(e - mx);
    const double lse = mx + std::log(sum);
    out.lse[branch] = lse;
    for (std::size_t j = 0; j < keys.size(); ++j) {
      s[j] = std::exp(s[j] - lse);
      for (std::int64_t d = 0; d < V; ++d) ob[z(d)] += s[j] * vb[keys[j] * V + d];
    }
    if (!x.dout) continue;
    const double gate = branch == 0 ? x.g_cmp : x.g_slc;
    double D = 0;
    for (std::int64_t d = 0; d < V; ++d) D += x.dout[d] * ob[z(d)];
    out.dg[branch] = D;
    double* dkb = branch == 0 ? grads->dkc.data() : grads->dk.data();
    double* dvb = branch == 0 ? grads->dvc.data() : grads->dv.data();
    for (std::size_t j = 0; j < keys.size(); ++j) {
      double dp = 0;
      for (std::int64_t d = 0; d < V; ++d) dp += gate * x.dout[d] * vb[keys[j] * V + d];
      const double ds = s[j] * (dp - gate * D);
      for (std::int64_t d = 0; d < V; ++d) dvb[keys[j] * V + d] += s[j] * gate * x.dout[d];
      for (std::int64_t d = 0; d < K; ++d) {
        out.dq[z(d)] += p.scale * ds * kb[keys[j] * K + d];
        dkb[keys[j] * K + d] += p.scale * ds * x.q[d];
      }
    }
  }
  return out;
}

// Every token's rows of a pair: q, the gates and the selection of the pair's kv head, and
// dout when given (backward). Rows [len][group * ...], [len][selected], [len].
struct PairRows {
  std::vector<double> q, g_cmp, g_slc, dout;
  std::vector<std::int64_t> sel, count;

  PairRows(const Pair& r, const ArgReader& read, bool backward) {
    const Problem& p = r.p;
    const std::int64_t HQ = p.heads, G = p.group, K = p.dk, V = p.dv, H = p.kv_heads, S = p.selected;
    q = row_slices(read, fwd::q, r.bos * HQ * K, HQ * K, r.len, r.h * G * K, G * K);
    g_cmp = row_slices(read, fwd::g_cmp, r.bos * HQ, HQ, r.len, r.h * G, G);
    g_slc = row_slices(read, fwd::g_slc, r.bos * HQ, HQ, r.len, r.h * G, G);
    sel = ints(row_slices(read, fwd::block_indices, r.bos * H * S, H * S, r.len, r.h * S, S));
    count = ints(row_slices(read, fwd::block_counts, r.bos * H, H, r.len, r.h, 1));
    for (std::int64_t i = 0; i < r.len; ++i)
      check_selection(p, r.bos + i, r.h, count[z(i)], std::span(sel).subspan(z(i * S), z(S)), r.len);
    if (backward) dout = row_slices(read, bwd::dout, r.bos * HQ * V, HQ * V, r.len, r.h * G * V, G * V);
  }

  Query query(const Problem& p, std::int64_t i, std::int64_t g) const {
    const std::int64_t G = p.group;
    return {i,
            q.data() + (i * G + g) * p.dk,
            std::span(sel).subspan(z(i * p.selected), z(count[z(i)])),
            g_cmp[z(i * G + g)],
            g_slc[z(i * G + g)],
            dout.empty() ? nullptr : dout.data() + (i * G + g) * p.dv};
  }
};

std::vector<std::int64_t> read_cu_seqlens(const Problem& p, const ArgReader& read) {
  const std::vector<std::int64_t> cu = ints(read(fwd::cu_seqlens, 0, p.num_seqs + 1));
  check_cu_seqlens(p, cu);
  return cu;
}

// The double-precision forward and, with dout, backward of every token, head and branch, a
// (sequence, kv head) pair at a time.
HostArrays exact(const Problem& p, const HostArrays& a, bool backward) {
  const ArgReader read = host_reader(a);
  const std::vector<std::int64_t> cu = read_cu_seqlens(p, read);
  const std::int64_t N = p.tokens(), HQ = p.heads, H = p.kv_heads, G = p.group, K = p.dk, V = p.dv;
  std::vector<double> o(z(N * HQ * V), 0.0), o_cmp(o), o_slc(o);
  std::vector<double> lse(z(N * HQ * 2), -std::numeric_limits<double>::infinity());
  std::vector<double> dq(z(N * HQ * K), 0.0), dk(z(N * H * K), 0.0), dv(z(N * H * V), 0.0), dg_cmp(z(N * HQ), 0.0), dg_slc(dg_cmp);
  for (std::int64_t n = 0; n < p.num_seqs; ++n)
    for (std::int64_t h = 0; h < H; ++h) {
      const Pair r(p, read, cu[z(n)], cu[z(n + 1)] - cu[z(n)], h);
      const PairRows rows(r, read, backward);
      KeyGrads grads(r);
      for (std::int64_t i = 0; i < r.len; ++i)
        for (std::int64_t g = 0; g < G; ++g) {
          const std::int64_t th = (r.bos + i) * HQ + h * G + g;
          const Query x = rows.query(p, i, g);
          const QueryOut y = attend(r, x, &grads);
          for (std::int64_t d = 0; d < V; ++d) {
            o_cmp[z(th * V + d)] = y.o_cmp[z(d)];
            o_slc[z(th * V + d)] = y.o_slc[z(d)];
            o[z(th * V + d)] = x.g_cmp * y.o_cmp[z(d)] + x.g_slc * y.o_slc[z(d)];
          }
          lse[z(th * 2)] = y.lse[0];
          lse[z(th * 2 + 1)] = y.lse[1];
          if (!backward) continue;
          for (std::int64_t d = 0; d < K; ++d) dq[z(th * K + d)] = y.dq[z(d)];
          dg_cmp[z(th)] = y.dg[0];
          dg_slc[z(th)] = y.dg[1];
        }
      if (!backward) continue;
      for (std::int64_t j = 0; j < r.len; ++j) {
        const std::int64_t row = (r.bos + j) * H + h;
        for (std::int64_t d = 0; d < K; ++d) dk[z(row * K + d)] = grads.key(p, j, d);
        for (std::int64_t d = 0; d < V; ++d) dv[z(row * V + d)] = grads.value(p, j, d);
      }
    }
  if (backward) return {std::move(dq), std::move(dk), std::move(dv), std::move(dg_cmp), std::move(dg_slc)};
  return {std::move(o), std::move(o_cmp), std::move(o_slc), std::move(lse)};
}

// Work at full selection: per token and query head, selected * block_size selection keys and on
// average seq / block_size / 2 compressed keys, each a dot of head_dim_k and an update of
// head_dim_v (2 flops each).
double pair_flops(const Problem& p) {
  const double keys = static_cast<double>(p.selected * p.block_size) +
                      static_cast<double>(p.seq) / static_cast<double>(p.block_size) / 2.0;
  return static_cast<double>(p.tokens() * p.heads) * keys * 2.0 * static_cast<double>(p.dk + p.dv);
}

double tolerance_of(const Problem& p) {
  const double longest = static_cast<double>(std::max({p.selected * p.block_size, p.dk, p.dv, p.seq}));
  return default_tolerance(p.dtype) * std::max(1.0, std::sqrt(longest / 256.0));
}

// Random floats, and block indices per (token, kv head): a shuffled draw of distinct blocks of
// the token's sequence (later blocks included, which the kernel ignores), a -1 marker in some
// slots, counts in [1, selected].
std::vector<Fill> random_inputs(const Invocation& inv, const std::vector<ArgDef>& defs, std::uint64_t seed) {
  const Problem p = Problem::of(inv);
  std::mt19937_64 rng(seed);
  std::vector<Fill> f = standard_fills(inv, defs);
  HostArrays a(inv.args.size());
  // Sequences of nearly equal length.
  auto& cu = a[fwd::cu_seqlens];
  cu.resize(z(p.num_seqs + 1));
  for (std::int64_t n = 0; n <= p.num_seqs; ++n) cu[z(n)] = static_cast<double>(p.tokens() * n / p.num_seqs);
  const auto place = places(p, ints(cu));
  auto& bi = a[fwd::block_indices];
  auto& bc = a[fwd::block_counts];
  bi.assign(z(p.tokens() * p.kv_heads * p.selected), -1.0);
  bc.assign(z(p.tokens() * p.kv_heads), 0.0);
  std::vector<std::int64_t> blocks;
  for (std::int64_t t = 0; t < p.tokens(); ++t) {
    const Place& pl = place[z(t)];
    const std::int64_t nb = (pl.eos - pl.bos + p.block_size - 1) / p.block_size;
    for (std::int64_t h = 0; h < p.kv_heads; ++h) {
      blocks.resize(z(nb));
      std::iota(blocks.begin(), blocks.end(), 0);
      std::shuffle(blocks.begin(), blocks.end(), rng);
      const std::int64_t cnt = std::uniform_int_distribution<std::int64_t>(1, p.selected)(rng);
      bc[z(t * p.kv_heads + h)] = static_cast<double>(cnt);
      for (std::int64_t i = 0; i < p.selected; ++i) {
        const bool marker = i < cnt && rng() % 5 == 0;
        bi[z((t * p.kv_heads + h) * p.selected + i)] =
            marker || i >= nb ? -1.0 : static_cast<double>(blocks[z(i)]);
      }
    }
  }
  for (std::size_t i : {fwd::block_indices, fwd::block_counts, fwd::cu_seqlens}) f[i] = Fill::of(std::move(a[i]));
  return f;
}

Invocation invocation_of(bool backward, const std::map<std::string, std::int64_t>& sizes, DType dtype,
                         const nlohmann::json& options) {
  const std::string kname = backward ? "native_sparse_attention_bwd" : "native_sparse_attention";
  const std::string list = "batch, seq, heads; optional kv_heads, head_dim, head_dim_v, selected";
  const RecipeSizes given(kname, sizes, recipe_sizes(), list);
  auto size = [&](const char* name, std::int64_t fallback) {
    const std::int64_t v = given(name, fallback);
    if (sizes.count(name) && v <= 0)
      throw InvalidArgument(kname + " size '" + name + "' must be positive, got " + std::to_string(v));
    return v;
  };
  std::int64_t block_size = 64, sequences = 1;
  double scale = 0.0;
  for (const auto& [key, v] : options.items()) {
    if (key == "block_size" || key == "sequences") {
      if (!v.is_number_integer() || v.get<std::int64_t>() <= 0 || v.get<std::int64_t>() > max_dim)
        throw InvalidArgument(kname + " option '" + key + "' must be a positive integer, got " + v.dump());
      (key == "block_size" ? block_size : sequences) = v.get<std::int64_t>();
    } else if (key == "scale") {
      if (!v.is_number()) throw InvalidArgument(kname + " option 'scale' must be a number, got " + v.dump());
      scale = v.get<double>();
    } else {
      throw InvalidArgument(kname + " has no option '" + key + "' (options: block_size, sequences, scale)");
    }
  }
  const std::int64_t B = size("batch", -1), T = size("seq", -1), HQ = size("heads", -1), H = size("kv_heads", 1);
  const std::int64_t K = size("head_dim", 64), V = size("head_dim_v", K), S = size("selected", 16);
  const TensorSpec q{{B, T, HQ, K}, dtype}, k{{B, T, H, K}, dtype}, v{{B, T, H, V}, dtype}, g{{B, T, HQ}, dtype};
  const TensorSpec bi{{B, T, H, S}, DType::i32}, bc{{B, T, H}, DType::i32}, cu{{sequences * B + 1}, DType::i32};
  const TensorSpec o{{B, T, HQ, V}, dtype}, lse{{B, T, HQ, 2}, DType::f32};
  std::vector<TensorSpec> a;
  if (!backward) a = {q, k, v, g, g, bi, bc, cu, o, o, o, lse};
  else a = {q, k, v, g, g, bi, bc, cu, o, o, lse, o, q, k, v, g, g};
  Invocation inv = backward ? backward_invocation(a, block_size, scale) : forward_invocation(a, block_size, scale);
  Registry::global().kernel(inv.kernel).validate(inv);
  return inv;
}

}  // namespace

std::vector<std::string> recipe_sizes() { return {"batch", "seq", "heads", "kv_heads", "head_dim", "head_dim_v", "selected"}; }

void NsaKernel::check(const Invocation& inv) const { (void)Problem::of(inv); }
void NsaBwdKernel::check(const Invocation& inv) const { (void)Problem::of(inv); }

namespace {
Vars vars_of(const Problem& p) {
  return {{"batch", p.batch},         {"seq", p.seq},         {"heads", p.heads},
          {"kv_heads", p.kv_heads},   {"group", p.group},     {"head_dim_k", p.dk},
          {"head_dim_v", p.dv},       {"selected", p.selected}, {"block_size", p.block_size},
          {"num_seqs", p.num_seqs},   {"tokens", p.tokens()}, {"dtype", std::string(to_string(p.dtype))},
          {"dtype_size", static_cast<std::int64_t>(dtype_size(p.dtype))}};
}
}  // namespace

Vars NsaKernel::vars(const Invocation& inv) const { return vars_of(Problem::of(inv)); }
Vars NsaBwdKernel::vars(const Invocation& inv) const { return vars_of(Problem::of(inv)); }

double NsaKernel::flops(const Invocation& inv) const { return pair_flops(Problem::of(inv)); }
// Scores again, dP, dQ, dK, dV: two and a half times the forward's.
double NsaBwdKernel::flops(const Invocation& inv) const { return 2.5 * pair_flops(Problem::of(inv)); }

double NsaKernel::bytes(const Invocation& inv) const {
  const Problem p = Problem::of(inv);
  const double e = static_cast<double>(dtype_size(p.dtype)), n = static_cast<double>(p.tokens());
  return n * (e * static_cast<double>(p.heads * (p.dk + 2 + 3 * p.dv) + p.kv_heads * (p.dk + p.dv)) +
              4.0 * static_cast<double>(p.heads * 2 + p.kv_heads * (p.selected + 1)));
}

double NsaBwdKernel::bytes(const Invocation& inv) const {
  const Problem p = Problem::of(inv);
  const double e = static_cast<double>(dtype_size(p.dtype)), n = static_cast<double>(p.tokens());
  return n * (e * static_cast<double>(p.heads * (2 * p.dk + 4 + 3 * p.dv) + 2 * p.kv_heads * (p.dk + p.dv)) +
              4.0 * static_cast<double>(p.heads * 2 + p.kv_heads * (p.selected + 1)));
}

HostArrays NsaKernel::reference(const Invocation& inv, const HostArrays& args) const {
  return exact(Problem::of(inv), args, false);
}

HostArrays NsaBwdKernel::reference(const Invocation& inv, const HostArrays& args) const {
  return exact(Problem::of(inv), args, true);
}

std::vector<SampledOutput> NsaKernel::sampled_reference(const Invocation& inv, const ArgReader& read) const {
  const Problem p = Problem::of(inv);
  const std::vector<std::int64_t> cu = read_cu_seqlens(p, read);
  const std::int64_t HQ = p.heads, H = p.kv_heads, G = p.group, K = p.dk, V = p.dv, S = p.selected;
  SampledPairs o, o_cmp, o_slc, lse;
  // (sequence, kv head) pairs spread over both; in each, query rows spread over its tokens and
  // the group's query heads, each reading its own rows of q, the gates and the selection.
  for (std::int64_t pair : sample_positions(p.num_seqs * H, 4)) {
    const std::int64_t n = pair / H, h = pair % H, bos = cu[z(n)], len = cu[z(n + 1)] - bos;
    if (len == 0) continue;
    const Pair r(p, read, bos, len, h);
    for (std::int64_t row : sample_positions(len * G, 8)) {
      const std::int64_t i = row / G, g = row % G, t = bos + i, th = t * HQ + h * G + g;
      const std::vector<double> q = read(fwd::q, th * K, K);
      const std::int64_t count = static_cast<std::int64_t>(read(fwd::block_counts, t * H + h, 1)[0]);
      const std::vector<std::int64_t> sel = ints(read(fwd::block_indices, (t * H + h) * S, std::clamp<std::int64_t>(count, 0, S)));
      check_selection(p, t, h, count, sel, len);
      const Query x{i, q.data(), sel, read(fwd::g_cmp, th, 1)[0], read(fwd::g_slc, th, 1)[0], nullptr};
      const QueryOut y = attend(r, x, nullptr);
      for (std::int64_t d = 0; d < V; ++d) {
        o.emplace_back(th * V + d, x.g_cmp * y.o_cmp[z(d)] + x.g_slc * y.o_slc[z(d)]);
        o_cmp.emplace_back(th * V + d, y.o_cmp[z(d)]);
        o_slc.emplace_back(th * V + d, y.o_slc[z(d)]);
      }
      lse.emplace_back(th * 2, y.lse[0]);
      lse.emplace_back(th * 2 + 1, y.lse[1]);
    }
  }
  return sampled_outputs({{fwd::o, std::move(o)}, {fwd::o_cmp, std::move(o_cmp)}, {fwd::o_slc, std::move(o_slc)}, {fwd::lse, std::move(lse)}});
}

std::vector<SampledOutput> NsaBwdKernel::sampled_reference(const Invocation& inv, const ArgReader& read) const {
  const Problem p = Problem::of(inv);
  const std::vector<std::int64_t> cu = read_cu_seqlens(p, read);
  const std::int64_t HQ = p.heads, H = p.kv_heads, G = p.group, K = p.dk, V = p.dv;
  SampledPairs dq, dk, dv, dg_cmp, dg_slc;
  // (sequence, kv head) pairs. A key's gradient sums over every later query of its sequence
  // (through the compressed blocks), so each pair's backward runs whole, its query heads on
  // every core, and 8 key rows of dk and dv and 8 query rows of dq, dg_cmp and dg_slc (over
  // the pair's tokens and query heads) are kept.
  for (std::int64_t pair : sample_positions(p.num_seqs * H, 2)) {
    const std::int64_t n = pair / H, h = pair % H, bos = cu[z(n)], len = cu[z(n + 1)] - bos;
    if (len == 0) continue;
    const Pair r(p, read, bos, len, h);
    const PairRows rows(r, read, true);
    const std::vector<std::int64_t> keys = sample_positions(len, 8), queries = sample_positions(len * G, 8);
    std::vector<KeyGrads> parts(host_threads(), KeyGrads(r));
    std::vector<QueryOut> kept(queries.size());
    for_parts(G, 1, [&](std::int64_t part, std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = 0; i < len; ++i)
        for (std::int64_t g = lo; g < hi; ++g) {
          QueryOut y = attend(r, rows.query(p, i, g), &parts[z(part)]);
          const auto at = std::lower_bound(queries.begin(), queries.end(), i * G + g);
          if (at != queries.end() && *at == i * G + g) kept[z(at - queries.begin())] = std::move(y);
        }
    });
    KeyGrads grads(r);
    for (const KeyGrads& part : parts) grads.add(part);
    for (std::size_t x = 0; x < queries.size(); ++x) {
      const std::int64_t th = (bos + queries[x] / G) * HQ + h * G + queries[x] % G;
      for (std::int64_t d = 0; d < K; ++d) dq.emplace_back(th * K + d, kept[x].dq[z(d)]);
      dg_cmp.emplace_back(th, kept[x].dg[0]);
      dg_slc.emplace_back(th, kept[x].dg[1]);
    }
    for (std::int64_t j : keys) {
      const std::int64_t row = (bos + j) * H + h;
      for (std::int64_t d = 0; d < K; ++d) dk.emplace_back(row * K + d, grads.key(p, j, d));
      for (std::int64_t d = 0; d < V; ++d) dv.emplace_back(row * V + d, grads.value(p, j, d));
    }
  }
  return sampled_outputs({{bwd::dq, std::move(dq)}, {bwd::dk, std::move(dk)}, {bwd::dv, std::move(dv)},
                          {bwd::dg_cmp, std::move(dg_cmp)}, {bwd::dg_slc, std::move(dg_slc)}});
}

double NsaKernel::tolerance(const Invocation& inv) const { return tolerance_of(Problem::of(inv)); }
// Gradients sum over every query that reads a key: twice the forward's.
double NsaBwdKernel::tolerance(const Invocation& inv) const { return 2.0 * tolerance_of(Problem::of(inv)); }

std::vector<Fill> NsaKernel::fills(const Invocation& inv, std::uint64_t seed) const { return random_inputs(inv, args(), seed); }

std::vector<Fill> NsaBwdKernel::fills(const Invocation& inv, std::uint64_t seed) const {
  std::vector<Fill> f = random_inputs(inv, args(), seed);
  f[bwd::o_cmp] = f[bwd::o_slc] = f[bwd::lse] = Fill::none();  // derive() computes them
  return f;
}

void NsaBwdKernel::derive(const Invocation& inv, std::span<const Tensor> args) const {
  // o_cmp, o_slc and lse must be the forward's for these q, k, v; its gated o is not needed.
  constexpr auto o = static_cast<std::size_t>(-1);
  const std::size_t from[] = {bwd::q,          bwd::k,           bwd::v, bwd::g_cmp, bwd::g_slc, bwd::block_indices,
                              bwd::block_counts, bwd::cu_seqlens, o,      bwd::o_cmp, bwd::o_slc, bwd::lse};
  const TensorSpec temporaries[] = {inv.args[bwd::o_cmp]};
  run_on("native_sparse_attention", inv, args, from, temporaries);
}

Invocation NsaKernel::from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                                 const nlohmann::json& options) const {
  return invocation_of(false, sizes, dtype, options);
}
Invocation NsaBwdKernel::from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                                    const nlohmann::json& options) const {
  return invocation_of(true, sizes, dtype, options);
}

EJK_BUILTIN(kernels, "native_sparse_attention") {
  r.add(std::make_shared<NsaKernel>());
  r.add(std::make_shared<NsaBwdKernel>());
}

}  // namespace ejk::kernels::native_sparse_attention
