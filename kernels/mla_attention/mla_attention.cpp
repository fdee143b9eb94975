#include "mla_attention/mla_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>

#include "common/builtin.hpp"
#include "common/sampled.hpp"
#include "ejk/error.hpp"

namespace ejk::kernels::mla_attention {

namespace {

const char* const names[arg::count] = {"q_nope", "q_pe", "kv_cache", "block_tables", "context_lens", "w_kc", "w_vc", "out"};
const char* const kname = "mla_decode";

std::string describe(std::size_t i, const TensorSpec& s) {
  return std::string(names[i]) + " " + to_string(s.shape) + " " + std::string(to_string(s.dtype));
}

std::string shape_text(std::initializer_list<std::int64_t> dims) {
  std::string s = "[";
  std::size_t n = 0;
  for (auto d : dims) s += (n++ ? ", " : "") + std::to_string(d);
  return s + "]";
}

}  // namespace

std::vector<ArgDef> decode_args() {
  std::vector<ArgDef> a;
  for (std::size_t i = 0; i < arg::count; ++i) a.push_back({names[i], i == arg::out ? Role::out : Role::in});
  return a;
}

Problem Problem::of(const Invocation& inv) {
  if (inv.args.size() != arg::count) {
    std::string list;
    for (std::size_t i = 0; i < arg::count; ++i) list += (i ? ", " : "") + std::string(names[i]);
    throw InvalidArgument(std::string(kname) + " takes " + std::to_string(arg::count) + " arguments (" + list +
                          "), got " + std::to_string(inv.args.size()));
  }
  for (const auto& [key, _] : inv.options.items())
    throw InvalidArgument(std::string(kname) + " has no option '" + key + "' (it takes none)");
  Problem p;
  for (const auto& [key, v] : inv.scalars.items()) {
    if (key != "softmax_scale")
      throw InvalidArgument(std::string(kname) + " has no scalar '" + key + "' (scalars: softmax_scale)");
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() == 0.0)
      throw InvalidArgument(std::string(kname) + " scalar 'softmax_scale' must be a finite non-zero number, got " + v.dump());
    p.scale = v.get<double>();
  }
  const auto& a = inv.args;
  auto rank_is = [&](std::size_t i, int r, const char* layout) {
    if (static_cast<int>(a[i].shape.size()) != r)
      throw InvalidArgument(std::string(kname) + ": " + describe(i, a[i]) + " must be " + layout);
  };
  rank_is(arg::q_nope, 3, "[batch, heads, qk_nope_head_dim]");
  rank_is(arg::q_pe, 3, "[batch, heads, rope_dim]");
  rank_is(arg::kv_cache, 3, "[num_blocks, block_size, kv_lora_rank + rope_dim]");
  rank_is(arg::block_tables, 2, "i32 [batch, max_blocks]");
  rank_is(arg::context_lens, 1, "i32 [batch]");
  rank_is(arg::w_kc, 3, "[heads, qk_nope_head_dim, kv_lora_rank]");
  rank_is(arg::w_vc, 3, "[heads, kv_lora_rank, v_head_dim]");
  rank_is(arg::out, 3, "[batch, heads, v_head_dim]");

  p.dtype = a[arg::q_nope].dtype;
  if (p.dtype != DType::f32 && p.dtype != DType::f16 && p.dtype != DType::bf16)
    throw InvalidArgument(std::string(kname) + ": " + describe(arg::q_nope, a[arg::q_nope]) + " must be f32, f16 or bf16");
  p.batch = a[arg::q_nope].shape[0];
  p.heads = a[arg::q_nope].shape[1];
  p.nope_dim = a[arg::q_nope].shape[2];
  p.rope_dim = a[arg::q_pe].shape[2];
  p.rank = a[arg::w_kc].shape[2];
  p.v_dim = a[arg::w_vc].shape[2];
  p.num_blocks = a[arg::kv_cache].shape[0];
  p.block_size = a[arg::kv_cache].shape[1];
  p.max_blocks = a[arg::block_tables].shape[1];
  if (p.heads <= 0 || p.nope_dim <= 0 || p.batch < 0)
    throw InvalidArgument(std::string(kname) + ": " + describe(arg::q_nope, a[arg::q_nope]) +
                          " needs heads and qk_nope_head_dim of at least 1");
  if (p.rope_dim < 0 || p.rank <= 0 || p.v_dim <= 0)
    throw InvalidArgument(std::string(kname) + ": kv_lora_rank (w_kc " + to_string(a[arg::w_kc].shape) +
                          ") and v_head_dim (w_vc " + to_string(a[arg::w_vc].shape) + ") must be at least 1");
  if (p.block_size <= 0 || p.num_blocks <= 0)
    throw InvalidArgument(std::string(kname) + ": " + describe(arg::kv_cache, a[arg::kv_cache]) +
                          " needs at least one page of at least one token");

  auto expect = [&](std::size_t i, Shape want, DType t, const char* layout) {
    if (a[i].shape != want || a[i].dtype != t)
      throw InvalidArgument(std::string(kname) + ": " + describe(i, a[i]) + " must be " + std::string(to_string(t)) + " " +
                            to_string(want) + " (" + layout + ")");
  };
  expect(arg::q_pe, {p.batch, p.heads, p.rope_dim}, p.dtype, "[batch, heads, rope_dim], like q_nope");
  expect(arg::kv_cache, {p.num_blocks, p.block_size, p.width()}, p.dtype,
         "[num_blocks, block_size, kv_lora_rank + rope_dim] with kv_lora_rank from w_kc and rope_dim from q_pe");
  expect(arg::block_tables, {p.batch, p.max_blocks}, DType::i32, "[batch, max_blocks]");
  expect(arg::context_lens, {p.batch}, DType::i32, "[batch]");
  expect(arg::w_kc, {p.heads, p.nope_dim, p.rank}, p.dtype, "[heads, qk_nope_head_dim, kv_lora_rank]");
  expect(arg::w_vc, {p.heads, p.rank, p.v_dim}, p.dtype, "[heads, kv_lora_rank, v_head_dim]");
  expect(arg::out, {p.batch, p.heads, p.v_dim}, p.dtype, "[batch, heads, v_head_dim]");
  // Device kernels index with 32-bit integers.
  const double cache_elems = static_cast<double>(p.num_blocks) * static_cast<double>(p.block_size) * static_cast<double>(p.width());
  if (cache_elems >= 2147483647.0)
    throw InvalidArgument(std::string(kname) + ": " + describe(arg::kv_cache, a[arg::kv_cache]) +
                          " holds 2^31 elements or more");
  if (p.scale == 0.0) p.scale = 1.0 / std::sqrt(static_cast<double>(p.nope_dim + p.rope_dim));
  return p;
}

Invocation decode_invocation(std::span<const TensorSpec> args, double softmax_scale) {
  Invocation inv;
  inv.kernel = kname;
  inv.args.assign(args.begin(), args.end());
  if (softmax_scale != 0.0) inv.scalars["softmax_scale"] = softmax_scale;
  return inv;
}

void check_tables(const Problem& p, std::span<const std::int64_t> tables, std::span<const std::int64_t> lens) {
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t n = lens[static_cast<std::size_t>(b)];
    if (n < 0 || n > p.capacity())
      throw InvalidArgument(std::string(kname) + ": context_lens[" + std::to_string(b) + "] = " + std::to_string(n) +
                            (n < 0 ? " is negative" : " is longer than block_tables " + shape_text({p.batch, p.max_blocks}) +
                                                          " covers with block_size " + std::to_string(p.block_size) +
                                                          " (" + std::to_string(p.capacity()) + " tokens)"));
    const std::int64_t used = (n + p.block_size - 1) / p.block_size;
    for (std::int64_t j = 0; j < used; ++j) {
      const std::int64_t e = tables[static_cast<std::size_t>(b * p.max_blocks + j)];
      if (e < 0 || e >= p.num_blocks)
        throw InvalidArgument(std::string(kname) + ": block_tables[" + std::to_string(b) + ", " + std::to_string(j) +
                              "] = " + std::to_string(e) + " is not a page of kv_cache " +
                              shape_text({p.num_blocks, p.block_size, p.width()}) + " (0 .. " +
                              std::to_string(p.num_blocks - 1) + ")");
    }
  }
}

void MlaDecodeKernel::check(const Invocation& inv) const { (void)Problem::of(inv); }

Vars MlaDecodeKernel::vars(const Invocation& inv) const {
  const Problem p = Problem::of(inv);
  return {{"batch", p.batch},
          {"heads", p.heads},
          {"qk_nope_head_dim", p.nope_dim},
          {"rope_dim", p.rope_dim},
          {"kv_lora_rank", p.rank},
          {"v_head_dim", p.v_dim},
          {"num_blocks", p.num_blocks},
          {"block_size", p.block_size},
          {"max_blocks", p.max_blocks},
          {"max_context", p.capacity()},
          {"dtype", std::string(to_string(p.dtype))},
          {"dtype_size", static_cast<std::int64_t>(dtype_size(p.dtype))}};
}

double MlaDecodeKernel::flops(const Invocation& inv) const {
  const Problem p = Problem::of(inv);
  const double bh = static_cast<double>(p.batch * p.heads);
  const double n = static_cast<double>(p.capacity());
  return bh * (2.0 * static_cast<double>(p.nope_dim * p.rank) + n * 2.0 * static_cast<double>(p.width() + p.rank) +
               2.0 * static_cast<double>(p.rank * p.v_dim));
}

double MlaDecodeKernel::bytes(const Invocation& inv) const {
  const Problem p = Problem::of(inv);
  const double e = static_cast<double>(dtype_size(p.dtype));
  const double cache = static_cast<double>(std::min(p.batch * p.capacity(), p.num_blocks * p.block_size)) *
                       static_cast<double>(p.width());
  const double weights = static_cast<double>(p.heads * p.rank * (p.nope_dim + p.v_dim));
  const double io = static_cast<double>(p.batch * p.heads * (p.nope_dim + p.rope_dim + p.v_dim));
  return e * (cache + weights + io) + 4.0 * static_cast<double>(p.batch * (p.max_blocks + 1));
}

namespace {

// out[b, h] (v_head_dim values) of one sequence and head, from its q_nope and q_pe rows, its
// context's cache rows (row(j): token j's c_kv | k_pe) and the head's w_kc and w_vc.
template <class Row>
void head_output(const Problem& p, const double* qn, const double* qp, std::int64_t n, Row row, const double* wk,
                 const double* wv, double* out) {
  const std::int64_t R = p.rank;
  std::fill(out, out + p.v_dim, 0.0);
  if (n == 0) return;
  std::vector<double> qlat(static_cast<std::size_t>(R)), s(static_cast<std::size_t>(n)), olat(static_cast<std::size_t>(R), 0.0);
  for (std::int64_t c = 0; c < R; ++c) {
    double acc = 0;
    for (std::int64_t d = 0; d < p.nope_dim; ++d) acc += qn[d] * wk[d * R + c];
    qlat[static_cast<std::size_t>(c)] = acc;
  }
  double mx = -std::numeric_limits<double>::infinity();
  for (std::int64_t j = 0; j < n; ++j) {
    const double* r = row(j);
    double acc = 0;
    for (std::int64_t c = 0; c < R; ++c) acc += qlat[static_cast<std::size_t>(c)] * r[c];
    for (std::int64_t c = 0; c < p.rope_dim; ++c) acc += qp[c] * r[R + c];
    s[static_cast<std::size_t>(j)] = acc * p.scale;
    mx = std::max(mx, acc * p.scale);
  }
  double sum = 0;
  for (auto& x : s) sum += (x = std::exp(x - mx));
  for (std::int64_t j = 0; j < n; ++j) {
    const double* r = row(j);
    const double w = s[static_cast<std::size_t>(j)] / sum;
    for (std::int64_t c = 0; c < R; ++c) olat[static_cast<std::size_t>(c)] += w * r[c];
  }
  for (std::int64_t d = 0; d < p.v_dim; ++d) {
    double acc = 0;
    for (std::int64_t c = 0; c < R; ++c) acc += olat[static_cast<std::size_t>(c)] * wv[c * p.v_dim + d];
    out[d] = acc;
  }
}

// Element of kv_cache where token j of sequence b starts.
std::int64_t cache_row(const Problem& p, std::span<const std::int64_t> tables, std::int64_t b, std::int64_t j) {
  const std::int64_t page = tables[static_cast<std::size_t>(b * p.max_blocks + j / p.block_size)];
  return (page * p.block_size + j % p.block_size) * p.width();
}

std::vector<std::int64_t> ints(const std::vector<double>& v) { return {v.begin(), v.end()}; }

}  // namespace

HostArrays MlaDecodeKernel::reference(const Invocation& inv, const HostArrays& args) const {
  const Problem p = Problem::of(inv);
  const std::vector<std::int64_t> tables = ints(args[arg::block_tables]), lens = ints(args[arg::context_lens]);
  check_tables(p, tables, lens);
  std::vector<double> out(static_cast<std::size_t>(p.batch * p.heads * p.v_dim), 0.0);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads; ++h) {
      const std::int64_t bh = b * p.heads + h;
      head_output(p, args[arg::q_nope].data() + bh * p.nope_dim, args[arg::q_pe].data() + bh * p.rope_dim,
                  lens[static_cast<std::size_t>(b)],
                  [&](std::int64_t j) { return args[arg::kv_cache].data() + cache_row(p, tables, b, j); },
                  args[arg::w_kc].data() + h * p.nope_dim * p.rank, args[arg::w_vc].data() + h * p.rank * p.v_dim,
                  out.data() + bh * p.v_dim);
    }
  return {std::move(out)};
}

std::vector<SampledOutput> MlaDecodeKernel::sampled_reference(const Invocation& inv, const ArgReader& read) const {
  const Problem p = Problem::of(inv);
  const std::vector<std::int64_t> tables = ints(read(arg::block_tables, 0, p.batch * p.max_blocks));
  const std::vector<std::int64_t> lens = ints(read(arg::context_lens, 0, p.batch));
  check_tables(p, tables, lens);
  const std::int64_t W = p.width();
  SampledPairs outs;
  // (sequence, head) pairs spread over both; each sequence's context read once, a page at a time.
  const std::vector<std::int64_t> pairs = sample_positions(p.batch * p.heads, 8);
  for (std::size_t x = 0; x < pairs.size();) {
    const std::int64_t b = pairs[x] / p.heads, n = lens[static_cast<std::size_t>(b)];
    std::vector<double> cache(static_cast<std::size_t>(n * W));
    for (std::int64_t j = 0; j < n;) {
      const std::int64_t m = std::min(p.block_size - j % p.block_size, n - j);
      const std::vector<double> rows = read(arg::kv_cache, cache_row(p, tables, b, j), m * W);
      std::copy(rows.begin(), rows.end(), cache.begin() + j * W);
      j += m;
    }
    for (; x < pairs.size() && pairs[x] / p.heads == b; ++x) {
      const std::int64_t h = pairs[x] % p.heads, bh = pairs[x];
      const std::vector<double> qn = read(arg::q_nope, bh * p.nope_dim, p.nope_dim), qp = read(arg::q_pe, bh * p.rope_dim, p.rope_dim);
      const std::vector<double> wk = read(arg::w_kc, h * p.nope_dim * p.rank, p.nope_dim * p.rank);
      const std::vector<double> wv = read(arg::w_vc, h * p.rank * p.v_dim, p.rank * p.v_dim);
      std::vector<double> o(static_cast<std::size_t>(p.v_dim));
      head_output(p, qn.data(), qp.data(), n, [&](std::int64_t j) { return cache.data() + j * W; }, wk.data(), wv.data(), o.data());
      for (std::int64_t d = 0; d < p.v_dim; ++d) outs.emplace_back(bh * p.v_dim + d, o[static_cast<std::size_t>(d)]);
    }
  }
  return sampled_outputs({{arg::out, std::move(outs)}});
}

double MlaDecodeKernel::tolerance(const Invocation& inv) const {
  // f32 sums over the context (probabilities), kv_lora_rank (scores, output projection) and
  // qk_nope_head_dim (absorption): the error grows like the square root of the longest.
  const Problem p = Problem::of(inv);
  const double longest = static_cast<double>(std::max({p.capacity(), p.rank, p.nope_dim}));
  return default_tolerance(p.dtype) * std::max(1.0, std::sqrt(longest / 256.0));
}

std::vector<Fill> MlaDecodeKernel::fills(const Invocation& inv, std::uint64_t seed) const {
  const Problem p = Problem::of(inv);
  const auto defs = args();
  std::vector<Fill> a = standard_fills(inv, defs);
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> pages(static_cast<std::size_t>(p.num_blocks));
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  std::vector<double> tables(static_cast<std::size_t>(p.batch * p.max_blocks));
  for (std::size_t i = 0; i < tables.size(); ++i) tables[i] = static_cast<double>(pages[i % pages.size()]);
  a[arg::block_tables] = Fill::of(std::move(tables));
  a[arg::context_lens] = Fill::of(std::vector<double>(static_cast<std::size_t>(p.batch), static_cast<double>(p.capacity())));
  return a;
}

std::vector<std::string> recipe_sizes() {
  return {"batch", "heads", "context", "qk_nope_head_dim", "rope_dim", "v_head_dim", "kv_lora_rank", "block_size"};
}

Invocation MlaDecodeKernel::from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                                       const nlohmann::json& options) const {
  const std::string list = "batch, heads, context; optional qk_nope_head_dim, rope_dim, v_head_dim, kv_lora_rank, block_size";
  const RecipeSizes given(kname, sizes, recipe_sizes(), list);
  auto size = [&](const char* name, std::int64_t fallback) {
    const std::int64_t v = given(name, fallback);
    if (sizes.count(name) && v <= 0 && std::string(name) != "context")
      throw InvalidArgument(std::string(kname) + " size '" + name + "' must be positive, got " + std::to_string(v));
    return v;
  };
  double scale = 0.0;
  for (const auto& [key, v] : options.items()) {
    if (key != "softmax_scale")
      throw InvalidArgument(std::string(kname) + " has no option '" + key + "' (options: softmax_scale)");
    if (!v.is_number()) throw InvalidArgument(std::string(kname) + " option 'softmax_scale' must be a number, got " + v.dump());
    scale = v.get<double>();
  }
  const std::int64_t batch = size("batch", -1), heads = size("heads", -1), context = size("context", -1);
  const std::int64_t dn = size("qk_nope_head_dim", 128), dr = size("rope_dim", 64), dv = size("v_head_dim", 128);
  const std::int64_t rank = size("kv_lora_rank", 512), bs = size("block_size", 64);
  if (context < 0) throw InvalidArgument(std::string(kname) + " size 'context' must not be negative");
  const std::int64_t max_blocks = std::max<std::int64_t>(1, (context + bs - 1) / bs);
  std::vector<TensorSpec> a{{{batch, heads, dn}, dtype},
                            {{batch, heads, dr}, dtype},
                            {{batch * max_blocks, bs, rank + dr}, dtype},
                            {{batch, max_blocks}, DType::i32},
                            {{batch}, DType::i32},
                            {{heads, dn, rank}, dtype},
                            {{heads, rank, dv}, dtype},
                            {{batch, heads, dv}, dtype}};
  Invocation inv = decode_invocation(a, scale);
  validate(inv);
  return inv;
}

EJK_BUILTIN(kernels, "mla_attention") { r.add(std::make_shared<MlaDecodeKernel>()); }

}  // namespace ejk::kernels::mla_attention
