#include "ragged_decode_attention/ragged_decode_attention.hpp"

#include <algorithm>
#include <cmath>

#include "common/builtin.hpp"
#include "decode_attention/engine.hpp"
#include "decode_attention/impls.hpp"
#include "ejk/error.hpp"

namespace ejk::kernels::ragged_decode_attention {

namespace da = decode_attention;

namespace {
const std::vector<std::string> names = {"query",        "key",         "value", "sequence_start",
                                        "sequence_end", "softmax_aux", "out"};
const char* const kernel_name = "ragged_decode_attention";
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
  return inv;
}

da::Engine engine(const Invocation& inv) {
  da::Engine e;
  e.kernel = kernel_name;
  e.names = names;
  e.at = {.q = arg::query, .k = arg::key, .v = arg::value, .kv_begin = arg::sequence_start,
          .kv_end = arg::sequence_end, .out = arg::out};
  e.layout = da::Layout::contiguous;
  auto fail = [&](const std::string& what) { throw InvalidArgument(e.kernel + ": " + what); };
  if (inv.args.size() != arg::count)
    fail("takes 7 arguments (query, key, value, sequence_start, sequence_end, softmax_aux, out), got " +
         std::to_string(inv.args.size()));
  da::known_keys(e.kernel, inv.options, "option", {"sliding_window", "logits_soft_cap"});
  da::known_keys(e.kernel, inv.scalars, "scalar", {"softmax_scale"});
  e.softcap = da::number_option(e.kernel, inv.options, "logits_soft_cap", 0.0);
  if (e.softcap < 0) fail("logits_soft_cap = " + std::to_string(e.softcap) + " must be >= 0 (0: off)");
  e.window = da::integer_option(e.kernel, inv.options, "sliding_window", 0);
  if (e.window < 0) fail("sliding_window = " + std::to_string(e.window) + " is negative (a number of keys, 0: off)");
  e.scale = da::number_option(e.kernel, inv.scalars, "softmax_scale", 0.0);

  const auto& a = inv.args;
  const TensorSpec &q = a[arg::query], &k = a[arg::key], &v = a[arg::value];
  auto d = [&](int i) { return da::describe(names[static_cast<std::size_t>(i)], a[static_cast<std::size_t>(i)]); };
  if (q.shape.size() != 3) fail(d(arg::query) + " must have rank 3: [batch, heads, head_dim]");
  if (k.shape.size() != 4) fail(d(arg::key) + " must have rank 4: [batch, seq, kv_heads, head_dim]");
  if (v.shape != k.shape) fail(d(arg::value) + " must have the shape of " + d(arg::key));
  da::expect_float(e, arg::query, q);
  if (k.dtype != q.dtype || v.dtype != q.dtype) fail("dtypes differ: " + d(arg::query) + ", " + d(arg::key) + ", " + d(arg::value));
  for (int i : {arg::query, arg::key})
    for (auto x : a[static_cast<std::size_t>(i)].shape)
      if (x <= 0) fail(d(i) + " has an empty dimension");
  e.dtype = q.dtype;
  e.num_seqs = e.tokens = q.shape[0];
  e.heads = q.shape[1];
  e.head_dim = q.shape[2];
  if (k.shape[0] != e.num_seqs) fail("batch differs: " + d(arg::query) + ", " + d(arg::key));
  e.seq_len = k.shape[1];
  e.kv_heads = k.shape[2];
  if (k.shape[3] != e.head_dim) fail("head_dim differs: " + d(arg::query) + ", " + d(arg::key));
  if (e.head_dim > da::max_head_dim)
    fail(d(arg::query) + ": head_dim " + std::to_string(e.head_dim) + " is not supported (1 to " +
         std::to_string(da::max_head_dim) + ")");
  if (e.heads % e.kv_heads != 0)
    fail("kv_heads " + std::to_string(e.kv_heads) + " of " + d(arg::key) + " does not divide heads " +
         std::to_string(e.heads) + " of " + d(arg::query));
  da::expect_index(e, arg::sequence_start, a[arg::sequence_start], {e.num_seqs}, "[batch]: first key of each sequence");
  da::expect_index(e, arg::sequence_end, a[arg::sequence_end], {e.num_seqs}, "[batch]: one past the last key");
  const TensorSpec& sinks = a[arg::softmax_aux];
  e.sinks = !is_absent(sinks);
  if (e.sinks && (sinks.shape != Shape{e.heads} || !is_float(sinks.dtype)))
    fail(d(arg::softmax_aux) + " must be a float [" + std::to_string(e.heads) + "]: one sink logit per head (or [0]: none)");
  if (e.sinks) e.at.sinks = arg::softmax_aux;
  if (a[arg::out] != q)
    fail(d(arg::out) + " must be " + to_string(q.shape) + " " + std::string(to_string(q.dtype)) + " (like query)");
  if (e.scale == 0.0) e.scale = 1.0 / std::sqrt(static_cast<double>(e.head_dim));
  return e;
}

void RaggedDecodeAttentionKernel::check(const Invocation& inv) const { (void)engine(inv); }
Vars RaggedDecodeAttentionKernel::vars(const Invocation& inv) const { return da::vars(engine(inv)); }

namespace {
std::int64_t keys(const da::Engine& e) { return e.window > 0 ? std::min(e.window, e.seq_len) : e.seq_len; }
}  // namespace

double RaggedDecodeAttentionKernel::flops(const Invocation& inv) const {
  const da::Engine e = engine(inv);
  return 4.0 * static_cast<double>(e.num_seqs * e.heads) * static_cast<double>(keys(e)) * static_cast<double>(e.head_dim);
}

double RaggedDecodeAttentionKernel::bytes(const Invocation& inv) const {
  const da::Engine e = engine(inv);
  // Index words: sequence_start and sequence_end.
  return da::moved_bytes(e, keys(e), 2 * e.num_seqs);
}

HostArrays RaggedDecodeAttentionKernel::reference(const Invocation& inv, const HostArrays& args) const {
  return {da::reference(engine(inv), args)};
}

std::vector<SampledOutput> RaggedDecodeAttentionKernel::sampled_reference(const Invocation& inv, const ArgReader& read) const {
  return da::sampled_reference(engine(inv), read, inv);
}

double RaggedDecodeAttentionKernel::tolerance(const Invocation& inv) const {
  const da::Engine e = engine(inv);
  return da::tolerance(e, keys(e));
}

std::vector<Fill> RaggedDecodeAttentionKernel::fills(const Invocation& inv, std::uint64_t /*seed*/) const {
  const da::Engine e = engine(inv);
  std::vector<Fill> a = standard_fills(inv, args());
  a[arg::sequence_start] = Fill::of(std::vector<double>(static_cast<std::size_t>(e.num_seqs), 0.0));
  a[arg::sequence_end] = Fill::of(std::vector<double>(static_cast<std::size_t>(e.num_seqs), static_cast<double>(e.seq_len)));
  return a;
}

Invocation RaggedDecodeAttentionKernel::from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                                                   const nlohmann::json& options) const {
  const std::string list = "batch, heads, head_dim, seq; optional kv_heads";
  const RecipeSizes size(kernel_name, sizes, size_names(), list);
  const std::int64_t batch = size("batch", -1), heads = size("heads", -1), dim = size("head_dim", -1);
  const std::int64_t seq = size("seq", -1), kv_heads = size("kv_heads", heads);
  Options o;
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
  const TensorSpec q{{batch, heads, dim}, dtype}, kv{{batch, seq, kv_heads, dim}, dtype}, idx{{batch}, DType::i32};
  const TensorSpec args[] = {q, kv, kv, idx, idx, sinks ? TensorSpec{{heads}, DType::f32} : absent(), q};
  Invocation inv = invocation(args, o);
  validate(inv);
  return inv;
}

// The decode engine runs it on every backend (decode_attention/impls.hpp).
const da::Client client{{kernel_name, args(), engine}};

EJK_BUILTIN(kernels, "ragged_decode_attention") { r.add(std::make_shared<RaggedDecodeAttentionKernel>()); }

}  // namespace ejk::kernels::ragged_decode_attention
