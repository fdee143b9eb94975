#include "ragged_page_attention/ragged_page_attention.hpp"

#include <algorithm>
#include <cmath>

#include "common/builtin.hpp"
#include "decode_attention/engine.hpp"
#include "decode_attention/impls.hpp"
#include "ejk/error.hpp"

namespace ejk::kernels::ragged_page_attention {

namespace da = decode_attention;

namespace {
const std::vector<std::string> names = {"queries",      "key_cache",       "value_cache", "kv_lens",
                                        "block_tables", "query_start_loc", "softmax_aux", "out"};
const char* const kernel_name = "ragged_page_attention";
bool is_absent(const TensorSpec& s) { return s.shape == Shape{0}; }
}  // namespace

std::vector<ArgDef> args() { return da::arg_defs(names, arg::out); }

TensorSpec absent() { return {Shape{0}, DType::f32}; }

Invocation invocation(std::span<const TensorSpec> a, const Options& o) {
  Invocation inv;
  inv.kernel = kernel_name;
  inv.args.assign(a.begin(), a.end());
  inv.options = {{"sliding_window", o.sliding_window}, {"logits_soft_cap", o.logits_soft_cap}};
  if (o.softmax_scale != 0.0) inv.scalars["softmax_scale"] = o.softmax_scale;
  if (o.num_seqs >= 0) inv.scalars["num_seqs"] = o.num_seqs;
  if (o.max_q_len > 0) inv.scalars["max_q_len"] = o.max_q_len;
  return inv;
}

da::Engine engine(const Invocation& inv) {
  da::Engine e;
  e.kernel = kernel_name;
  e.names = names;
  e.at = {.q = arg::queries, .k = arg::key_cache, .v = arg::value_cache, .block_tables = arg::block_tables,
          .kv_end = arg::kv_lens, .q_loc = arg::query_start_loc, .out = arg::out};
  e.layout = da::Layout::paged;
  e.varlen = true;
  auto fail = [&](const std::string& what) { throw InvalidArgument(e.kernel + ": " + what); };
  if (inv.args.size() != arg::count)
    fail("takes 8 arguments (queries, key_cache, value_cache, kv_lens, block_tables, query_start_loc, softmax_aux, "
         "out), got " + std::to_string(inv.args.size()));
  da::known_keys(e.kernel, inv.options, "option", {"sliding_window", "logits_soft_cap"});
  da::known_keys(e.kernel, inv.scalars, "scalar", {"softmax_scale", "num_seqs", "max_q_len"});
  e.softcap = da::number_option(e.kernel, inv.options, "logits_soft_cap", 0.0);
  if (e.softcap < 0) fail("logits_soft_cap = " + std::to_string(e.softcap) + " must be >= 0 (0: off)");
  e.window = da::integer_option(e.kernel, inv.options, "sliding_window", 0);
  if (e.window < 0) fail("sliding_window = " + std::to_string(e.window) + " is negative (a number of keys, 0: off)");
  e.scale = da::number_option(e.kernel, inv.scalars, "softmax_scale", 0.0);

  const auto& a = inv.args;
  const TensorSpec &q = a[arg::queries], &k = a[arg::key_cache], &v = a[arg::value_cache];
  auto d = [&](int i) { return da::describe(names[static_cast<std::size_t>(i)], a[static_cast<std::size_t>(i)]); };
  if (q.shape.size() != 3) fail(d(arg::queries) + " must have rank 3: [tokens, heads, head_dim]");
  if (k.shape.size() != 4) fail(d(arg::key_cache) + " must have rank 4: [num_blocks, kv_heads, block_size, head_dim]");
  if (v.shape != k.shape) fail(d(arg::value_cache) + " must have the shape of " + d(arg::key_cache));
  da::expect_float(e, arg::queries, q);
  if (k.dtype != q.dtype || v.dtype != q.dtype)
    fail("dtypes differ: " + d(arg::queries) + ", " + d(arg::key_cache) + ", " + d(arg::value_cache));
  if (q.shape[1] <= 0 || q.shape[2] <= 0 || q.shape[0] < 0) fail(d(arg::queries) + " has an empty head dimension");
  for (auto x : k.shape)
    if (x <= 0) fail(d(arg::key_cache) + " has an empty dimension");
  e.dtype = q.dtype;
  e.tokens = q.shape[0];
  e.heads = q.shape[1];
  e.head_dim = q.shape[2];
  e.num_blocks = k.shape[0];
  e.kv_heads = k.shape[1];
  e.block_size = k.shape[2];
  if (k.shape[3] != e.head_dim) fail("head_dim differs: " + d(arg::queries) + ", " + d(arg::key_cache));
  if (e.head_dim > da::max_head_dim)
    fail(d(arg::queries) + ": head_dim " + std::to_string(e.head_dim) + " is not supported (1 to " +
         std::to_string(da::max_head_dim) + ")");
  if (e.heads % e.kv_heads != 0)
    fail("kv_heads " + std::to_string(e.kv_heads) + " of " + d(arg::key_cache) + " does not divide heads " +
         std::to_string(e.heads) + " of " + d(arg::queries));
  const TensorSpec& lens = a[arg::kv_lens];
  if (lens.shape.size() != 1 || lens.dtype != DType::i32) fail(d(arg::kv_lens) + " must be i32 [max_num_seqs]");
  const std::int64_t max_seqs = lens.shape[0];
  const TensorSpec& t = a[arg::block_tables];
  if (t.shape.size() != 2 || t.shape[0] != max_seqs || t.shape[1] <= 0 || t.dtype != DType::i32)
    fail(d(arg::block_tables) + " must be i32 [" + std::to_string(max_seqs) + ", max_blocks_per_seq >= 1] (" +
         d(arg::kv_lens) + ")");
  e.max_blocks = t.shape[1];
  da::expect_index(e, arg::query_start_loc, a[arg::query_start_loc], {max_seqs + 1},
                   "[max_num_seqs + 1] with " + d(arg::kv_lens));
  e.num_seqs = da::integer_option(e.kernel, inv.scalars, "num_seqs", max_seqs);
  if (e.num_seqs < 0 || e.num_seqs > max_seqs)
    fail("num_seqs = " + std::to_string(e.num_seqs) + " is outside [0, " + std::to_string(max_seqs) + "] (" +
         d(arg::kv_lens) + ")");
  e.max_q_len = da::integer_option(e.kernel, inv.scalars, "max_q_len", 0);
  if (e.max_q_len < 0) fail("max_q_len = " + std::to_string(e.max_q_len) + " is negative");
  if (e.max_q_len == 0) e.max_q_len = std::max<std::int64_t>(1, e.tokens);
  const TensorSpec& sinks = a[arg::softmax_aux];
  e.sinks = !is_absent(sinks);
  if (e.sinks && (sinks.shape != Shape{e.heads} || !is_float(sinks.dtype)))
    fail(d(arg::softmax_aux) + " must be a float [" + std::to_string(e.heads) + "]: one sink logit per head (or [0]: none)");
  if (e.sinks) e.at.sinks = arg::softmax_aux;
  if (a[arg::out] != q)
    fail(d(arg::out) + " must be " + to_string(q.shape) + " " + std::string(to_string(q.dtype)) + " (like queries)");
  if (e.scale == 0.0) e.scale = 1.0 / std::sqrt(static_cast<double>(e.head_dim));
  return e;
}

void RaggedPageAttentionKernel::check(const Invocation& inv) const { (void)engine(inv); }
Vars RaggedPageAttentionKernel::vars(const Invocation& inv) const { return da::vars(engine(inv)); }

double RaggedPageAttentionKernel::flops(const Invocation& inv) const {
  const da::Engine e = engine(inv);
  return 4.0 * static_cast<double>(e.tokens * e.heads) * static_cast<double>(e.capacity()) * static_cast<double>(e.head_dim);
}

double RaggedPageAttentionKernel::bytes(const Invocation& inv) const {
  const da::Engine e = engine(inv);
  // Index words: context lens, query_start_loc and block_tables.
  return da::moved_bytes(e, da::paged_keys(e), e.num_seqs * (2 + e.max_blocks));
}

HostArrays RaggedPageAttentionKernel::reference(const Invocation& inv, const HostArrays& args) const {
  return {da::reference(engine(inv), args)};
}

std::vector<SampledOutput> RaggedPageAttentionKernel::sampled_reference(const Invocation& inv, const ArgReader& read) const {
  return da::sampled_reference(engine(inv), read, inv);
}

double RaggedPageAttentionKernel::tolerance(const Invocation& inv) const {
  const da::Engine e = engine(inv);
  return da::tolerance(e, e.capacity());
}

std::vector<Fill> RaggedPageAttentionKernel::fills(const Invocation& inv, std::uint64_t seed) const {
  const da::Engine e = engine(inv);
  std::vector<Fill> a = standard_fills(inv, args());
  const std::int64_t max_seqs = inv.args[arg::kv_lens].shape[0];
  a[arg::kv_lens] = Fill::of(std::vector<double>(static_cast<std::size_t>(max_seqs), static_cast<double>(e.capacity())));
  a[arg::block_tables] = Fill::of(da::shuffled_tables(max_seqs, e.max_blocks, e.num_blocks, seed));
  std::vector<double> loc{0};
  const std::int64_t n = std::max<std::int64_t>(1, e.num_seqs);
  for (std::int64_t s = 0; s < max_seqs; ++s) {
    const std::int64_t len = s < e.num_seqs ? e.tokens / n + (s < e.tokens % n ? 1 : 0) : 0;
    loc.push_back(loc.back() + static_cast<double>(len));
  }
  if (e.num_seqs == 0) std::fill(loc.begin(), loc.end(), 0.0);
  a[arg::query_start_loc] = Fill::of(loc);
  (void)da::ranges(e, da::index_values(a));  // the even split must respect max_q_len and the contexts
  return a;
}

Invocation RaggedPageAttentionKernel::from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                                                 const nlohmann::json& options) const {
  const std::string list = "num_seqs, q_len, context, heads, head_dim; optional kv_heads, block_size";
  const RecipeSizes size(kernel_name, sizes, size_names(), list);
  const std::int64_t seqs = size("num_seqs", -1), q_len = size("q_len", -1), context = size("context", -1);
  const std::int64_t heads = size("heads", -1), dim = size("head_dim", -1), kv_heads = size("kv_heads", heads);
  const std::int64_t bs = size("block_size", 16);
  if (seqs <= 0 || q_len <= 0 || context < q_len || bs <= 0)
    throw InvalidArgument(std::string(kernel_name) + ": needs num_seqs >= 1, q_len >= 1, context >= q_len, block_size >= 1");
  const std::int64_t max_blocks = (context + bs - 1) / bs;
  Options o;
  o.max_q_len = q_len;
  bool sinks = false;
  for (const auto& item : options.items()) {
    const std::string& key = item.key();  // names lambdas can capture (Clang < 16: no bindings)
    const nlohmann::json& v = item.value();
    auto want = [&](bool ok, const char* what) {
      if (!ok) throw InvalidArgument(std::string(kernel_name) + " option '" + key + "' must be " + what + ", got " + v.dump());
    };
    if (key == "logits_soft_cap") { want(v.is_number(), "a number"); o.logits_soft_cap = v.get<double>(); }
    else if (key == "softmax_scale") { want(v.is_number(), "a number"); o.softmax_scale = v.get<double>(); }
    else if (key == "sliding_window") { want(v.is_number_integer(), "an integer"); o.sliding_window = v.get<std::int64_t>(); }
    else if (key == "sinks") { want(v.is_boolean(), "a boolean"); sinks = v.get<bool>(); }
    else
      throw InvalidArgument(std::string(kernel_name) + " has no option '" + key +
                            "' (options: sliding_window, logits_soft_cap, softmax_scale, sinks)");
  }
  const TensorSpec q{{seqs * q_len, heads, dim}, dtype}, cache{{seqs * max_blocks, kv_heads, bs, dim}, dtype};
  const TensorSpec args[] = {q,
                             cache,
                             cache,
                             {{seqs}, DType::i32},
                             {{seqs, max_blocks}, DType::i32},
                             {{seqs + 1}, DType::i32},
                             sinks ? TensorSpec{{heads}, DType::f32} : absent(),
                             q};
  Invocation inv = invocation(args, o);
  validate(inv);
  return inv;
}

// The decode engine runs it on every backend (decode_attention/impls.hpp).
const da::Client client{{kernel_name, args(), engine}};

EJK_BUILTIN(kernels, "ragged_page_attention") { r.add(std::make_shared<RaggedPageAttentionKernel>()); }

}  // namespace ejk::kernels::ragged_page_attention
