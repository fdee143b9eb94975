#include "decode_attention/engine.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "ejk/error.hpp"

namespace ejk::kernels::decode_attention {

namespace {

std::vector<std::int64_t> as_int(const std::vector<double>& v) {
  std::vector<std::int64_t> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<std::int64_t>(v[i]);
  return out;
}

std::string list(std::span<const std::int64_t> c) {
  std::string s = "[";
  for (std::size_t i = 0; i < c.size() && i < 12; ++i) s += (i ? ", " : "") + std::to_string(c[i]);
  return s + (c.size() > 12 ? ", ...]" : "]");
}

}  // namespace

std::string describe(const std::string& name, const TensorSpec& s) {
  return name + " " + to_string(s.shape) + " " + std::string(to_string(s.dtype));
}

void expect_index(const Engine& e, int slot, const TensorSpec& s, const Shape& shape, const std::string& what) {
  if (s.shape != shape || s.dtype != DType::i32)
    throw InvalidArgument(e.kernel + ": " + describe(e.name(slot), s) + " must be i32 " + to_string(shape) + " (" +
                          what + ")");
}

void expect_float(const Engine& e, int slot, const TensorSpec& s) {
  if (s.dtype != DType::f32 && s.dtype != DType::f16 && s.dtype != DType::bf16)
    throw InvalidArgument(e.kernel + ": " + describe(e.name(slot), s) + ": dtype " + std::string(to_string(s.dtype)) +
                          " is not supported (f32, f16, bf16)");
}

double number_option(const std::string& kernel, const nlohmann::json& from, const char* name, double fallback) {
  if (!from.contains(name)) return fallback;
  const auto& v = from.at(name);
  if (!v.is_number()) throw InvalidArgument(kernel + " option '" + name + "' must be a number, got " + v.dump());
  const double d = v.get<double>();
  if (!std::isfinite(d)) throw InvalidArgument(kernel + " option '" + name + "' must be finite, got " + v.dump());
  return d;
}

std::int64_t integer_option(const std::string& kernel, const nlohmann::json& from, const char* name,
                            std::int64_t fallback) {
  if (!from.contains(name)) return fallback;
  const auto& v = from.at(name);
  if (!v.is_number_integer()) throw InvalidArgument(kernel + " option '" + name + "' must be an integer, got " + v.dump());
  return v.get<std::int64_t>();
}

void known_keys(const std::string& kernel, const nlohmann::json& from, const char* kind,
                std::initializer_list<const char*> allowed) {
  for (const auto& item : from.items()) {
    const std::string& key = item.key();  // a name lambdas can capture (Clang < 16: no bindings)
    if (std::any_of(allowed.begin(), allowed.end(), [&](const char* a) { return key == a; })) continue;
    std::string names;
    for (const char* a : allowed) names += (names.empty() ? "" : ", ") + std::string(a);
    throw InvalidArgument(kernel + " has no " + kind + " '" + key + "' (" + kind + "s: " + (names.empty() ? "none" : names) +
                          ")");
  }
}

Ranges ranges(const Engine& e, std::span<const std::int64_t> kv_begin, std::span<const std::int64_t> kv_end,
              std::span<const std::int64_t> q_loc, std::span<const std::int64_t> block_tables) {
  const auto n = static_cast<std::size_t>(e.num_seqs);
  auto fail = [&](const std::string& what) { throw InvalidArgument(e.kernel + ": " + what); };
  Ranges r;
  r.q_start.resize(n);
  r.q_len.resize(n);
  r.kv_begin.assign(n, 0);
  r.kv_end.resize(n);
  if (e.varlen) {
    const std::string qn = e.name(e.at.q_loc);
    if (q_loc.empty() || q_loc[0] != 0) fail(qn + " " + list(q_loc) + " must start at 0");
    for (std::size_t s = 1; s <= n; ++s)
      if (q_loc[s] < q_loc[s - 1])
        fail(qn + " " + list(q_loc) + " decreases at index " + std::to_string(s) + " (" + std::to_string(q_loc[s - 1]) +
             " then " + std::to_string(q_loc[s]) + ")");
    if (q_loc[n] > e.tokens)
      fail(qn + " " + list(q_loc) + " ends at " + std::to_string(q_loc[n]) + " for " + std::to_string(e.num_seqs) +
           " sequences, beyond the " + std::to_string(e.tokens) + " query tokens of " + e.name(e.at.q));
  }
  const std::int64_t cap = e.capacity();
  for (std::size_t s = 0; s < n; ++s) {
    const std::string seq = "sequence " + std::to_string(s);
    r.q_start[s] = e.varlen ? q_loc[s] : static_cast<std::int64_t>(s);
    r.q_len[s] = e.varlen ? q_loc[s + 1] - q_loc[s] : 1;
    if (e.varlen && r.q_len[s] > e.max_q_len)
      fail(seq + " has " + std::to_string(r.q_len[s]) + " query tokens, more than max_q_len " +
           std::to_string(e.max_q_len));
    const std::int64_t end = kv_end[s];
    const std::int64_t begin = e.at.kv_begin >= 0 ? kv_begin[s] : 0;
    const std::string en = e.name(e.at.kv_end);
    if (end < 0) fail(en + "[" + std::to_string(s) + "] = " + std::to_string(end) + " is negative");
    if (end > cap)
      fail(en + "[" + std::to_string(s) + "] = " + std::to_string(end) + " is longer than the " + std::to_string(cap) +
           " keys " +
           (e.layout == Layout::paged ? e.name(e.at.block_tables) + " covers (" + std::to_string(e.max_blocks) +
                                            " blocks of " + std::to_string(e.block_size) + ")"
                                      : e.name(e.at.k) + " holds per sequence"));
    if (e.at.kv_begin >= 0 && (begin < 0 || begin > end))
      fail(e.name(e.at.kv_begin) + "[" + std::to_string(s) + "] = " + std::to_string(begin) + " is outside [0, " + en +
           "[" + std::to_string(s) + "] = " + std::to_string(end) + "]");
    // One query per sequence (decoding) may have no key: it gives 0.
    if (e.varlen && r.q_len[s] > end - begin)
      fail(seq + " has " + std::to_string(r.q_len[s]) + " query tokens (" + e.name(e.at.q_loc) + ") but only " +
           std::to_string(end - begin) + " keys (" + en + "): its queries must be the last of its context");
    if (e.layout == Layout::paged) {
      for (std::int64_t b = 0; b * e.block_size < end; ++b) {
        const std::int64_t page = block_tables[s * static_cast<std::size_t>(e.max_blocks) + static_cast<std::size_t>(b)];
        if (page < 0 || page >= e.num_blocks)
          fail(e.name(e.at.block_tables) + "[" + std::to_string(s) + ", " + std::to_string(b) + "] = " +
               std::to_string(page) + " is not a block of " + e.name(e.at.k) + " (0 to " + std::to_string(e.num_blocks - 1) +
               ")");
      }
    }
    r.kv_begin[s] = begin;
    r.kv_end[s] = end;
  }
  return r;
}

Ranges ranges(const Engine& e, const HostArrays& a) {
  auto get = [&](int slot) { return slot >= 0 ? as_int(a[static_cast<std::size_t>(slot)]) : std::vector<std::int64_t>{}; };
  const auto b = get(e.at.kv_begin), en = get(e.at.kv_end), q = get(e.at.q_loc), t = get(e.at.block_tables);
  return ranges(e, b, en, q, t);
}

namespace {

// One query row: q (head_dim values) against keys lo..pos, key(t) and value(t) pointing at
// head_dim values each; `sink` is the head's sink logit or -inf. Writes head_dim values.
template <class Key, class Value>
void attend(const Engine& e, const double* q, std::int64_t lo, std::int64_t pos, double sink, const Key& key,
            const Value& value, double* out) {
  const std::int64_t D = e.head_dim;
  std::vector<double> z, acc(static_cast<std::size_t>(D), 0.0);
  double m = sink;
  for (std::int64_t t = lo; t <= pos; ++t) {
    const double* k = key(t);
    double dot = 0;
    for (std::int64_t d = 0; d < D; ++d) dot += q[d] * k[d];
    double u = e.scale * dot;
    if (e.softcap > 0) u = e.softcap * std::tanh(u / e.softcap);
    z.push_back(u);
    m = std::max(m, u);
  }
  double sum = e.sinks ? std::exp(sink - m) : 0.0;
  for (std::int64_t t = lo; t <= pos; ++t) {
    const double p = std::exp(z[static_cast<std::size_t>(t - lo)] - m);
    sum += p;
    const double* v = value(t);
    for (std::int64_t d = 0; d < D; ++d) acc[static_cast<std::size_t>(d)] += p * v[d];
  }
  for (std::int64_t d = 0; d < D; ++d) out[d] = pos >= lo ? acc[static_cast<std::size_t>(d)] / sum : 0.0;
}

// Where query i of sequence s sits and the first key it sees.
std::int64_t position(const Ranges& r, std::size_t s, std::int64_t i) { return r.kv_end[s] - r.q_len[s] + i; }
std::int64_t first_key(const Engine& e, const Ranges& r, std::size_t s, std::int64_t pos) {
  return e.window > 0 ? std::max(r.kv_begin[s], pos - e.window + 1) : r.kv_begin[s];
}

}  // namespace

std::vector<double> reference(const Engine& e, const HostArrays& a) {
  const Ranges r = ranges(e, a);
  const auto& q = a[static_cast<std::size_t>(e.at.q)];
  const auto& k = a[static_cast<std::size_t>(e.at.k)];
  const auto& v = a[static_cast<std::size_t>(e.at.v)];
  const auto& tables = e.layout == Layout::paged ? a[static_cast<std::size_t>(e.at.block_tables)] : q;
  std::vector<double> out = a[static_cast<std::size_t>(e.at.out)];
  const std::int64_t D = e.head_dim;
  auto key_row = [&](std::int64_t s, std::int64_t g, std::int64_t t) -> std::size_t {
    if (e.layout == Layout::contiguous) return static_cast<std::size_t>(((s * e.seq_len + t) * e.kv_heads + g) * D);
    const auto page = static_cast<std::int64_t>(tables[static_cast<std::size_t>(s * e.max_blocks + t / e.block_size)]);
    return static_cast<std::size_t>(((page * e.kv_heads + g) * e.block_size + t % e.block_size) * D);
  };
  for (std::int64_t s = 0; s < e.num_seqs; ++s) {
    const auto si = static_cast<std::size_t>(s);
    for (std::int64_t i = 0; i < r.q_len[si]; ++i) {
      const std::int64_t tok = r.q_start[si] + i, pos = position(r, si, i), lo = first_key(e, r, si, pos);
      for (std::int64_t h = 0; h < e.heads; ++h) {
        const std::int64_t g = h / e.group();
        const std::size_t qrow = static_cast<std::size_t>((tok * e.heads + h) * D);
        const double sink = e.sinks ? a[static_cast<std::size_t>(e.at.sinks)][static_cast<std::size_t>(h)]
                                    : -std::numeric_limits<double>::infinity();
        attend(e, q.data() + qrow, lo, pos, sink, [&](std::int64_t t) { return k.data() + key_row(s, g, t); },
               [&](std::int64_t t) { return v.data() + key_row(s, g, t); }, out.data() + qrow);
      }
    }
  }
  return out;
}

std::vector<SampledOutput> sampled_reference(const Engine& e, const ArgReader& read, const Invocation& inv) {
  auto whole = [&](int slot) {
    return slot >= 0 ? as_int(read(static_cast<std::size_t>(slot), 0, numel(inv.args[static_cast<std::size_t>(slot)].shape)))
                     : std::vector<std::int64_t>{};
  };
  const std::vector<std::int64_t> tables = e.layout == Layout::paged ? whole(e.at.block_tables) : std::vector<std::int64_t>{};
  const Ranges r = ranges(e, whole(e.at.kv_begin), whole(e.at.kv_end), whole(e.at.q_loc), tables);
  const std::vector<double> sinks =
      e.sinks ? read(static_cast<std::size_t>(e.at.sinks), 0, e.heads) : std::vector<double>{};
  const std::int64_t D = e.head_dim;
  std::vector<std::pair<std::int64_t, double>> outs;
  // (sequence, kv head) pairs spread over both; in each, rows over its query heads and tokens.
  for (std::int64_t pair : sample_positions(e.num_seqs * e.kv_heads, 4)) {
    const std::int64_t s = pair / e.kv_heads, g = pair % e.kv_heads;
    const auto si = static_cast<std::size_t>(s);
    if (r.q_len[si] == 0) continue;
    // The keys and values of head g the sequence can see, [t - kb][D]: a page at a time, or a
    // stretch of tokens (every kv head) at a time.
    const std::int64_t kb = r.kv_begin[si], n = r.kv_end[si] - kb;
    std::vector<double> keys(static_cast<std::size_t>(n * D)), values(keys.size());
    for (auto [slot, dst] : {std::pair{e.at.k, &keys}, std::pair{e.at.v, &values}}) {
      const auto arg = static_cast<std::size_t>(slot);
      if (e.layout == Layout::paged) {
        for (std::int64_t t = kb; t < kb + n;) {
          const std::int64_t page = tables[static_cast<std::size_t>(s * e.max_blocks + t / e.block_size)];
          const std::int64_t row = t % e.block_size, m = std::min(e.block_size - row, kb + n - t);
          const std::vector<double> got = read(arg, ((page * e.kv_heads + g) * e.block_size + row) * D, m * D);
          std::copy(got.begin(), got.end(), dst->begin() + (t - kb) * D);
          t += m;
        }
      } else {
        const std::int64_t stride = e.kv_heads * D, step = std::max<std::int64_t>(1, (std::int64_t{1} << 20) / stride);
        for (std::int64_t t = kb; t < kb + n; t += step) {
          const std::int64_t m = std::min(step, kb + n - t);
          const std::vector<double> got = read(arg, (s * e.seq_len + t) * stride, m * stride);
          for (std::int64_t j = 0; j < m; ++j)
            std::copy_n(got.begin() + j * stride + g * D, D, dst->begin() + (t - kb + j) * D);
        }
      }
    }
    for (std::int64_t row : sample_positions(e.group() * r.q_len[si], 8)) {
      const std::int64_t h = g * e.group() + row / r.q_len[si], i = row % r.q_len[si];
      const std::int64_t tok = r.q_start[si] + i, pos = position(r, si, i), lo = first_key(e, r, si, pos);
      const std::vector<double> q = read(static_cast<std::size_t>(e.at.q), (tok * e.heads + h) * D, D);
      const double sink = e.sinks ? sinks[static_cast<std::size_t>(h)] : -std::numeric_limits<double>::infinity();
      std::vector<double> o(static_cast<std::size_t>(D));
      attend(e, q.data(), lo, pos, sink, [&](std::int64_t t) { return keys.data() + (t - kb) * D; },
             [&](std::int64_t t) { return values.data() + (t - kb) * D; }, o.data());
      for (std::int64_t d = 0; d < D; ++d) outs.emplace_back((tok * e.heads + h) * D + d, o[static_cast<std::size_t>(d)]);
    }
  }
  std::sort(outs.begin(), outs.end());
  SampledOutput out{static_cast<std::size_t>(e.at.out), {}, {}};
  for (const auto& [at, value] : outs) {
    out.index.push_back(at);
    out.value.push_back(value);
  }
  if (out.index.empty()) return {};
  return {std::move(out)};
}

double tolerance(const Engine& e, std::int64_t keys) {
  const double growth = std::sqrt(static_cast<double>(std::max(keys, e.head_dim)) / 256.0);
  return default_tolerance(e.dtype) * std::max(1.0, growth);
}

double moved_bytes(const Engine& e, std::int64_t keys_per_seq, std::int64_t index_words) {
  const double el = static_cast<double>(dtype_size(e.dtype));
  const double keys = static_cast<double>(e.num_seqs) * static_cast<double>(keys_per_seq);
  return el * (2.0 * keys * static_cast<double>(e.kv_heads * e.head_dim) +
               2.0 * static_cast<double>(e.tokens * e.heads * e.head_dim)) +
         4.0 * static_cast<double>(index_words);
}


int flags(const Engine& e) {
  return (e.layout == Layout::paged ? paged_flag : 0) | (e.at.kv_begin >= 0 ? has_begin_flag : 0) |
         (e.varlen ? varlen_flag : 0) | (e.sinks ? sinks_flag : 0);
}

LogitScales logit_scales(const Engine& e) {
  constexpr double log2e = 1.4426950408889634;
  if (e.softcap > 0) return {static_cast<float>(e.scale / e.softcap), static_cast<float>(e.softcap * log2e)};
  return {static_cast<float>(e.scale * log2e), 0.f};
}

Vars vars(const Engine& e) {
  return {{"num_seqs", e.num_seqs},
          {"tokens", e.tokens},
          {"heads", e.heads},
          {"kv_heads", e.kv_heads},
          {"group", e.group()},
          {"head_dim", e.head_dim},
          {"max_keys", e.capacity()},
          {"max_q_len", e.max_q_len},
          {"block_size", e.block_size},
          {"paged", std::int64_t{e.layout == Layout::paged}},
          {"window", e.window},
          {"sinks", std::int64_t{e.sinks}},
          {"softcap", std::int64_t{e.softcap > 0}},
          {"dtype", std::string(to_string(e.dtype))},
          {"dtype_size", static_cast<std::int64_t>(dtype_size(e.dtype))}};
}

std::vector<ArgDef> arg_defs(const std::vector<std::string>& names, int out) {
  std::vector<ArgDef> a;
  for (std::size_t i = 0; i < names.size(); ++i)
    a.push_back({names[i], static_cast<int>(i) == out ? Role::out : Role::in});
  return a;
}

HostArrays index_values(const std::vector<Fill>& fills) {
  HostArrays a;
  for (const auto& f : fills) a.push_back(f.kind == Fill::Kind::values ? f.values : std::vector<double>{});
  return a;
}

std::vector<double> shuffled_tables(std::int64_t num_seqs, std::int64_t max_blocks, std::int64_t num_blocks,
                                    std::uint64_t seed) {
  std::vector<std::int64_t> pages(static_cast<std::size_t>(num_blocks));
  std::iota(pages.begin(), pages.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(pages.begin(), pages.end(), rng);
  std::vector<double> t(static_cast<std::size_t>(num_seqs * max_blocks));
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<double>(pages[i % pages.size()]);
  return t;
}

}  // namespace ejk::kernels::decode_attention

#include "core/static_list.hpp"
#include "decode_attention/impls.hpp"

namespace ejk::kernels::decode_attention {

Client::Client(Binding b) { static_list<Binding>().push_back(std::move(b)); }

std::vector<Binding> clients() {
  std::vector<Binding> list = static_list<Binding>();
  std::sort(list.begin(), list.end(), [](const Binding& a, const Binding& b) { return a.kernel < b.kernel; });
  return list;
}

std::int64_t heuristic_splits(const Engine& e, std::int64_t block_q, std::int64_t block_k, std::int64_t parallel) {
  // Groups that hold queries: the launch has up to num_seqs more (query_blocks), which return at once.
  const std::int64_t busy = e.varlen ? std::max(e.num_seqs, (e.tokens + block_q - 1) / block_q) : query_blocks(e, block_q);
  const std::int64_t groups = std::max<std::int64_t>(1, busy * e.kv_heads);
  const std::int64_t most = std::max<std::int64_t>(1, e.capacity() / (4 * block_k));
  std::int64_t s = 1;
  while (s < 32 && s * 2 <= most && groups * s < 2 * parallel) s *= 2;
  return s;
}

std::int64_t query_block(const Engine& e) {
  if (!e.varlen) return 1;
  std::int64_t bq = 1;
  while (bq < 8 && bq < e.max_q_len && e.group() * bq * 2 <= 16) bq *= 2;
  return bq;
}

std::int64_t heuristic_threads(const Engine& e, std::int64_t block_q, std::int64_t least) {
  const std::int64_t dm = dim_class(e.head_dim);
  std::int64_t t = least;
  while (t < 256 && rows(e, block_q) * dm > 8 * t) t *= 2;
  return t;
}

std::int64_t dim_class(std::int64_t head_dim) {
  std::int64_t c = 32;
  while (c < head_dim) c *= 2;
  return c;
}

std::int64_t stream_keys(std::int64_t block_k, std::int64_t dm, std::int64_t threads) { return block_k * (dm / 8) / threads; }

bool stream_fits(std::int64_t block_k, std::int64_t dm, std::int64_t threads) {
  return threads >= dm / 8 && block_k * (dm / 8) % threads == 0 && stream_keys(block_k, dm, threads) >= 1;
}

std::string stream_constraint(const std::string& rows) {
  return "threads >= head_dim_class / 8 && block_k * (head_dim_class / 8) % threads == 0 && "
         "block_k * (head_dim_class / 8) >= threads && block_k * (head_dim_class / 8) <= 4 * threads && " +
         rows + " * 16 + 8 * dtype_size * (block_k * (head_dim_class / 8) / threads) <= 160";
}

std::string stream_shared(const std::string& rows) {
  const std::string dots = rows + " * block_k * (head_dim_class / 8 + 1)";
  const std::string sums = "threads / (head_dim_class / 8) * " + rows + " * (head_dim_class + 1)";
  return "4 * (max(" + dots + ", " + sums + ") + 2 * " + rows + " * (block_k + 1) + 4 * " + rows + ")";
}

std::optional<Config> stream_heuristic(const Engine& e, const ParamSpace& space, std::int64_t block_q,
                                       std::initializer_list<std::int64_t> widths, std::int64_t parallel) {
  const std::int64_t dm = dim_class(e.head_dim);
  for (std::int64_t kpt : {4, 2, 1})
    for (std::int64_t t : widths) {
      const std::int64_t bk = kpt * t / (dm / 8);
      Config c{{"splits", heuristic_splits(e, block_q, bk, parallel)}, {"block_k", bk}, {"threads", t}, {"stream", 1}};
      if (e.varlen) c.set("block_q", block_q);
      if (space.admits(c)) return c;
    }
  return std::nullopt;
}

}  // namespace ejk::kernels::decode_attention
