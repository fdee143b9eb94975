#include "page_attention/page_attention.hpp"

#include <algorithm>
#include <cmath>

#include "common/builtin.hpp"
#include "decode_attention/engine.hpp"
#include "decode_attention/impls.hpp"
#include "ejk/error.hpp"

namespace ejk::kernels::page_attention {

namespace da = decode_attention;

namespace {
const std::vector<std::string> names = {"query", "key_cache", "value_cache", "context_lens", "block_tables", "out"};
const char* const kernel_name = "page_attention";
}  // namespace

std::vector<ArgDef> args() { return da::arg_defs(names, arg::out); }

Invocation invocation(std::span<const TensorSpec> a, const Options& o) {
  Invocation inv;
  inv.kernel = kernel_name;
  inv.args.assign(a.begin(), a.end());
  inv.options = {{"logits_soft_cap", o.logits_soft_cap}};
  if (o.softmax_scale != 0.0) inv.scalars["softmax_scale"] = o.softmax_scale;
  return inv;
}

da::Engine engine(const Invocation& inv) {
  da::Engine e;
  e.kernel = kernel_name;
  e.names = names;
  e.at = {.q = arg::query, .k = arg::key_cache, .v = arg::value_cache, .block_tables = arg::block_tables,
          .kv_end = arg::context_lens, .out = arg::out};
  e.layout = da::Layout::paged;
  auto fail = [&](const std::string& what) { throw InvalidArgument(e.kernel + ": " + what); };
  if (inv.args.size() != arg::count)
    fail("takes 6 arguments (query, key_cache, value_cache, context_lens, block_tables, out), got " +
         std::to_string(inv.args.size()));
  da::known_keys(e.kernel, inv.options, "option", {"logits_soft_cap"});
  da::known_keys(e.kernel, inv.scalars, "scalar", {"softmax_scale"});
  e.softcap = da::number_option(e.kernel, inv.options, "logits_soft_cap", 0.0);
  if (e.softcap < 0) fail("logits_soft_cap = " + std::to_string(e.softcap) + " must be >= 0 (0: off)");
  e.scale = da::number_option(e.kernel, inv.scalars, "softmax_scale", 0.0);

  const auto& a = inv.args;
  const TensorSpec &q = a[arg::query], &k = a[arg::key_cache], &v = a[arg::value_cache];
  auto d = [&](int i) { return da::describe(names[static_cast<std::size_t>(i)], a[static_cast<std::size_t>(i)]); };
  if (q.shape.size() != 3) fail(d(arg::query) + " must have rank 3: [batch, heads, head_dim]");
  if (k.shape.size() != 4) fail(d(arg::key_cache) + " must have rank 4: [num_blocks, kv_heads, block_size, head_dim]");
  if (v.shape != k.shape) fail(d(arg::value_cache) + " must have the shape of " + d(arg::key_cache));
  da::expect_float(e, arg::query, q);
  if (k.dtype != q.dtype || v.dtype != q.dtype) fail("dtypes differ: " + d(arg::query) + ", " + d(arg::key_cache) + ", " + d(arg::value_cache));
  for (int i : {arg::query, arg::key_cache})
    for (auto x : a[static_cast<std::size_t>(i)].shape)
      if (x <= 0) fail(d(i) + " has an empty dimension");
  e.dtype = q.dtype;
  e.num_seqs = e.tokens = q.shape[0];
  e.heads = q.shape[1];
  e.head_dim = q.shape[2];
  e.num_blocks = k.shape[0];
  e.kv_heads = k.shape[1];
  e.block_size = k.shape[2];
  if (k.shape[3] != e.head_dim) fail("head_dim differs: " + d(arg::query) + ", " + d(arg::key_cache));
  if (e.head_dim > da::max_head_dim)
    fail(d(arg::query) + ": head_dim " + std::to_string(e.head_dim) + " is not supported (1 to " +
         std::to_string(da::max_head_dim) + ")");
  if (e.heads % e.kv_heads != 0)
    fail("kv_heads " + std::to_string(e.kv_heads) + " of " + d(arg::key_cache) + " does not divide heads " +
         std::to_string(e.heads) + " of " + d(arg::query));
  da::expect_index(e, arg::context_lens, a[arg::context_lens], {e.num_seqs}, "[batch]: keys per sequence");
  const TensorSpec& t = a[arg::block_tables];
  if (t.shape.size() != 2 || t.shape[0] != e.num_seqs || t.shape[1] <= 0 || t.dtype != DType::i32)
    fail(d(arg::block_tables) + " must be i32 [" + std::to_string(e.num_seqs) + ", max_blocks_per_seq >= 1]");
  e.max_blocks = t.shape[1];
  const TensorSpec& o = a[arg::out];
  if (o != q) fail(d(arg::out) + " must be " + to_string(q.shape) + " " + std::string(to_string(q.dtype)) + " (like query)");
  if (e.scale == 0.0) e.scale = 1.0 / std::sqrt(static_cast<double>(e.head_dim));
  return e;
}

void PageAttentionKernel::check(const Invocation& inv) const { (void)engine(inv); }
Vars PageAttentionKernel::vars(const Invocation& inv) const { return da::vars(engine(inv)); }

double PageAttentionKernel::flops(const Invocation& inv) const {
  const da::Engine e = engine(inv);
  return 4.0 * static_cast<double>(e.num_seqs * e.heads) * static_cast<double>(e.capacity()) * static_cast<double>(e.head_dim);
}

double PageAttentionKernel::bytes(const Invocation& inv) const {
  const da::Engine e = engine(inv);
  // Index words: context_lens and block_tables.
  return da::moved_bytes(e, da::paged_keys(e), e.num_seqs * (1 + e.max_blocks));
}

HostArrays PageAttentionKernel::reference(const Invocation& inv, const HostArrays& args) const {
  return {da::reference(engine(inv), args)};
}

std::vector<SampledOutput> PageAttentionKernel::sampled_reference(const Invocation& inv, const ArgReader& read) const {
  return da::sampled_reference(engine(inv), read, inv);
}

double PageAttentionKernel::tolerance(const Invocation& inv) const {
  const da::Engine e = engine(inv);
  return da::tolerance(e, e.capacity());
}

std::vector<Fill> PageAttentionKernel::fills(const Invocation& inv, std::uint64_t seed) const {
  const da::Engine e = engine(inv);
  std::vector<Fill> a = standard_fills(inv, args());
  a[arg::context_lens] = Fill::of(std::vector<double>(static_cast<std::size_t>(e.num_seqs), static_cast<double>(e.capacity())));
  a[arg::block_tables] = Fill::of(da::shuffled_tables(e.num_seqs, e.max_blocks, e.num_blocks, seed));
  return a;
}

std::vector<std::string> PageAttentionKernel::size_names() const {
  return {"batch", "heads", "head_dim", "context", "kv_heads", "block_size", "num_blocks"};
}

std::map<std::string, std::int64_t> PageAttentionKernel::example_sizes() const {
  return {{"batch", 8}, {"heads", 32}, {"kv_heads", 8}, {"head_dim", 128}, {"context", 4096}};
}

Invocation PageAttentionKernel::from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                                           const nlohmann::json& options) const {
  const std::string list = "batch, heads, head_dim, context; optional kv_heads, block_size, num_blocks";
  const RecipeSizes size(kernel_name, sizes, size_names(), list);
  const std::int64_t batch = size("batch", -1), heads = size("heads", -1), dim = size("head_dim", -1);
  const std::int64_t context = size("context", -1), kv_heads = size("kv_heads", heads), bs = size("block_size", 16);
  if (context < 0 || bs <= 0) throw InvalidArgument(std::string(kernel_name) + ": context must be >= 0 and block_size > 0");
  const std::int64_t max_blocks = std::max<std::int64_t>(1, (context + bs - 1) / bs);
  const std::int64_t blocks = size("num_blocks", batch * max_blocks);
  Options o;
  for (const auto& [key, v] : options.items()) {
    if (!v.is_number()) throw InvalidArgument(std::string(kernel_name) + " option '" + key + "' must be a number, got " + v.dump());
    if (key == "logits_soft_cap") o.logits_soft_cap = v.get<double>();
    else if (key == "softmax_scale") o.softmax_scale = v.get<double>();
    else throw InvalidArgument(std::string(kernel_name) + " has no option '" + key + "' (options: logits_soft_cap, softmax_scale)");
  }
  const TensorSpec q{{batch, heads, dim}, dtype}, cache{{blocks, kv_heads, bs, dim}, dtype};
  const TensorSpec args[] = {q, cache, cache, {{batch}, DType::i32}, {{batch, max_blocks}, DType::i32}, q};
  Invocation inv = invocation(args, o);
  validate(inv);
  return inv;
}

// The decode engine runs it on every backend (decode_attention/impls.hpp).
const da::Client client{{kernel_name, args(), engine}};

EJK_BUILTIN(kernels, "page_attention") { r.add(std::make_shared<PageAttentionKernel>()); }

}  // namespace ejk::kernels::page_attention
