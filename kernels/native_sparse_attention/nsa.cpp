#include "native_sparse_attention/nsa.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>

#include "common/builtin.hpp"
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

void check_indices(const Problem& p, std::span<const std::int64_t> bi, std::span<const std::int64_t> bc,
                   std::span<const std::int64_t> cu) {
  const std::string kname = p.backward ? "native_sparse_attention_bwd" : "native_sparse_attention";
  const std::int64_t N = p.tokens(), H = p.kv_heads, S = p.selected;
  if (cu[0] != 0) throw InvalidArgument(kname + ": cu_seqlens[0] = " + std::to_string(cu[0]) + " must be 0");
  for (std::int64_t n = 0; n < p.num_seqs; ++n)
    if (cu[z(n + 1)] < cu[z(n)])
      throw InvalidArgument(kname + ": cu_seqlens[" + std::to_string(n + 1) + "] = " + std::to_string(cu[z(n + 1)]) +
                            " is less than cu_seqlens[" + std::to_string(n) + "] = " + std::to_string(cu[z(n)]));
  if (cu[z(p.num_seqs)] != N)
    throw InvalidArgument(kname + ": cu_seqlens[" + std::to_string(p.num_seqs) + "] = " +
                          std::to_string(cu[z(p.num_seqs)]) + " must be batch * seq = " + std::to_string(N));
  const auto place = places(p, cu);
  for (std::int64_t t = 0; t < N; ++t)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t c = bc[z(t * H + h)];
      auto where = [&](std::int64_t i) {
        std::string s = "[" + std::to_string(t / std::max<std::int64_t>(1, p.seq)) + ", " +
                        std::to_string(t % std::max<std::int64_t>(1, p.seq)) + ", " + std::to_string(h);
        return i < 0 ? s + "]" : s + ", " + std::to_string(i) + "]";
      };
      if (c < 0 || c > S)
        throw InvalidArgument(kname + ": block_counts" + where(-1) + " = " + std::to_string(c) + " is outside [0, " +
                              std::to_string(S) + "] (selected)");
      const std::int64_t len = place[z(t)].eos - place[z(t)].bos;
      const std::int64_t blocks = (len + p.block_size - 1) / p.block_size;
      for (std::int64_t i = 0; i < c; ++i) {
        const std::int64_t e = bi[z((t * H + h) * S + i)];
        if (e >= blocks)
          throw InvalidArgument(kname + ": block_indices" + where(i) + " = " + std::to_string(e) +
                                " is not a block of its sequence of " + std::to_string(len) + " tokens (" +
                                std::to_string(blocks) + " blocks of " + std::to_string(p.block_size) + ")");
      }
    }
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

// The double-precision forward and, given dout, backward of every token, head and branch.
struct Exact {
  std::vector<double> o, o_cmp, o_slc, lse;
  std::vector<double> dq, dk, dv, dg_cmp, dg_slc;
};

Exact exact(const Problem& p, const HostArrays& a, const std::vector<double>* dout) {
  const auto bi = ints(a[fwd::block_indices]), bc = ints(a[fwd::block_counts]), cu = ints(a[fwd::cu_seqlens]);
  check_indices(p, bi, bc, cu);
  const auto place = places(p, cu);
  const std::int64_t N = p.tokens(), HQ = p.heads, H = p.kv_heads, G = p.group, K = p.dk, V = p.dv, BS = p.block_size;
  const auto &q = a[fwd::q], &k = a[fwd::k], &v = a[fwd::v], &gc = a[fwd::g_cmp], &gs = a[fwd::g_slc];
  Exact r;
  r.o.assign(z(N * HQ * V), 0.0);
  r.o_cmp = r.o_slc = r.o;
  r.lse.assign(z(N * HQ * 2), -std::numeric_limits<double>::infinity());
  // Mean-pooled keys and values of every whole block, at the row of the block's first token.
  std::vector<double> kc(z(N * H * K), 0.0), vc(z(N * H * V), 0.0);
  for (std::int64_t t = 0; t < N; ++t) {
    const Place& pl = place[z(t)];
    if (pl.pos % BS != 0 || t + BS > pl.eos) continue;
    for (std::int64_t h = 0; h < H; ++h) {
      for (std::int64_t j = t; j < t + BS; ++j) {
        for (std::int64_t d = 0; d < K; ++d) kc[z((t * H + h) * K + d)] += k[z((j * H + h) * K + d)] / static_cast<double>(BS);
        for (std::int64_t d = 0; d < V; ++d) vc[z((t * H + h) * V + d)] += v[z((j * H + h) * V + d)] / static_cast<double>(BS);
      }
    }
  }
  std::vector<double> dkc, dvc;
  if (dout) {
    r.dq.assign(z(N * HQ * K), 0.0);
    r.dk.assign(z(N * H * K), 0.0);
    r.dv.assign(z(N * H * V), 0.0);
    r.dg_cmp.assign(z(N * HQ), 0.0);
    r.dg_slc = r.dg_cmp;
    dkc.assign(kc.size(), 0.0);
    dvc.assign(vc.size(), 0.0);
  }
  struct Key {
    const double* k;
    const double* v;
    double* dk;
    double* dv;
  };
  std::vector<Key> keys;
  std::vector<double> s;
  for (std::int64_t t = 0; t < N; ++t) {
    const Place& pl = place[z(t)];
    for (std::int64_t h = 0; h < H; ++h) {
      for (int branch = 0; branch < 2; ++branch) {
        keys.clear();
        if (branch == 0) {
          for (std::int64_t c = 0; c < (pl.pos + 1) / BS; ++c) {
            const std::int64_t row = (pl.bos + c * BS) * H + h;
            keys.push_back({&kc[z(row * K)], &vc[z(row * V)], dout ? &dkc[z(row * K)] : nullptr,
                            dout ? &dvc[z(row * V)] : nullptr});
          }
        } else {
          const std::int64_t cnt = bc[z(t * H + h)];
          for (std::int64_t i = 0; i < cnt; ++i) {
            const std::int64_t e = bi[z((t * H + h) * p.selected + i)];
            if (e < 0 || e * BS > pl.pos) continue;
            for (std::int64_t j = e * BS; j < std::min((e + 1) * BS, pl.pos + 1); ++j) {
              const std::int64_t row = (pl.bos + j) * H + h;
              keys.push_back({&k[z(row * K)], &v[z(row * V)], dout ? &r.dk[z(row * K)] : nullptr,
                              dout ? &r.dv[z(row * V)] : nullptr});
            }
          }
        }
        for (std::int64_t g = 0; g < G; ++g) {
          const std::int64_t hq = h * G + g, th = t * HQ + hq;
          const double* qr = &q[z(th * K)];
          std::vector<double>& ob = branch == 0 ? r.o_cmp : r.o_slc;
          if (keys.empty()) continue;
          s.assign(keys.size(), 0.0);
          double mx = -std::numeric_limits<double>::infinity();
          for (std::size_t j = 0; j < keys.size(); ++j) {
            double acc = 0;
            for (std::int64_t d = 0; d < K; ++d) acc += qr[d] * keys[j].k[d];
            s[j] = acc * p.scale;
            mx = std::max(mx, s[j]);
          }
          double sum = 0;
          for (double x : s) sum += std::exp(x - mx);
          const double lse = mx + std::log(sum);
          r.lse[z(th * 2 + branch)] = lse;
          for (std::size_t j = 0; j < keys.size(); ++j) {
            s[j] = std::exp(s[j] - lse);
            for (std::int64_t d = 0; d < V; ++d) ob[z(th * V + d)] += s[j] * keys[j].v[d];
          }
          if (!dout) continue;
          const double gate = branch == 0 ? gc[z(th)] : gs[z(th)];
          const double* dor = &(*dout)[z(th * V)];
          double D = 0;
          for (std::int64_t d = 0; d < V; ++d) D += dor[d] * ob[z(th * V + d)];
          (branch == 0 ? r.dg_cmp : r.dg_slc)[z(th)] = D;
          for (std::size_t j = 0; j < keys.size(); ++j) {
            double dp = 0;
            for (std::int64_t d = 0; d < V; ++d) dp += gate * dor[d] * keys[j].v[d];
            const double ds = s[j] * (dp - gate * D);
            for (std::int64_t d = 0; d < V; ++d) keys[j].dv[d] += s[j] * gate * dor[d];
            for (std::int64_t d = 0; d < K; ++d) {
              r.dq[z(th * K + d)] += p.scale * ds * keys[j].k[d];
              keys[j].dk[d] += p.scale * ds * qr[d];
            }
          }
        }
      }
    }
  }
  for (std::int64_t i = 0; i < N * HQ; ++i)
    for (std::int64_t d = 0; d < V; ++d)
      r.o[z(i * V + d)] = a[fwd::g_cmp][z(i)] * r.o_cmp[z(i * V + d)] + a[fwd::g_slc][z(i)] * r.o_slc[z(i * V + d)];
  if (dout) {
    // Mean pooling: every key of a whole block gets 1/block_size of the block's gradient.
    for (std::int64_t t = 0; t < N; ++t) {
      const Place& pl = place[z(t)];
      if (pl.pos % BS != 0 || t + BS > pl.eos) continue;
      for (std::int64_t j = t; j < t + BS; ++j)
        for (std::int64_t h = 0; h < H; ++h) {
          for (std::int64_t d = 0; d < K; ++d) r.dk[z((j * H + h) * K + d)] += dkc[z((t * H + h) * K + d)] / static_cast<double>(BS);
          for (std::int64_t d = 0; d < V; ++d) r.dv[z((j * H + h) * V + d)] += dvc[z((t * H + h) * V + d)] / static_cast<double>(BS);
        }
    }
  }
  return r;
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
  const Problem p = Problem::of(inv);
  Exact r = exact(p, args, nullptr);
  return {std::move(r.o), std::move(r.o_cmp), std::move(r.o_slc), std::move(r.lse)};
}

HostArrays NsaBwdKernel::reference(const Invocation& inv, const HostArrays& args) const {
  const Problem p = Problem::of(inv);
  Exact r = exact(p, args, &args[bwd::dout]);
  return {std::move(r.dq), std::move(r.dk), std::move(r.dv), std::move(r.dg_cmp), std::move(r.dg_slc)};
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
