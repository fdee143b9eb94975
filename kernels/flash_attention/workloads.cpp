// flash_attention's workloads: invocations from recipe sizes, and valid random arguments for
// tuning and benchmarks.
#include <algorithm>
#include <cmath>

#include "ejk/error.hpp"
#include "ejk/registry.hpp"
#include "flash_attention/flash_attention.hpp"

namespace ejk::kernels::flash_attention {

namespace {

const char* const size_list = "seq (or seq_q and seq_k), heads, head_dim; optional batch, kv_heads";
const char* const option_list =
    "causal, window_left, window_right, logits_soft_cap, dropout, deterministic, softmax_scale, dropout_seed, diagonal_offset, bias, "
    "sinks, segments";

// Token counts split as evenly as the sequences allow, as cu_seqlens.
std::vector<double> even_offsets(std::int64_t total, std::int64_t batch, std::int64_t longest, const char* name) {
  const std::int64_t base = total / batch, extra = total % batch;
  if (base + (extra ? 1 : 0) > longest)
    throw InvalidArgument(std::string(name) + ": " + std::to_string(total) + " tokens do not fit " +
                          std::to_string(batch) + " sequences of at most " + std::to_string(longest));
  std::vector<double> cu{0};
  for (std::int64_t b = 0; b < batch; ++b) cu.push_back(cu.back() + static_cast<double>(base + (b < extra ? 1 : 0)));
  return cu;
}

// Two runs of segment ids per sequence.
std::vector<double> segment_runs(const std::vector<double>& cu) {
  std::vector<double> ids;
  for (std::size_t b = 0; b + 1 < cu.size(); ++b) {
    const auto len = static_cast<std::int64_t>(cu[b + 1] - cu[b]);
    for (std::int64_t i = 0; i < len; ++i) ids.push_back(static_cast<double>(2 * i / len));
  }
  return ids;
}

struct Slots {
  std::size_t cu_q, cu_k, q_seg, k_seg;
};

std::vector<Fill> fill(const Invocation& inv, const std::vector<ArgDef>& defs, const Slots& at) {
  const Problem p = Problem::of(inv);
  std::vector<Fill> a = standard_fills(inv, defs);
  std::vector<double> cu_q, cu_k;
  if (p.varlen) {
    cu_q = even_offsets(p.total_q, p.batch, p.seq_q, "cu_seqlens_q");
    cu_k = even_offsets(p.total_k, p.batch, p.seq_k, "cu_seqlens_k");
    a[at.cu_q] = Fill::of(cu_q);
    a[at.cu_k] = Fill::of(cu_k);
  } else {
    for (std::int64_t b = 0; b <= p.batch; ++b) {
      cu_q.push_back(static_cast<double>(b * p.seq_q));
      cu_k.push_back(static_cast<double>(b * p.seq_k));
    }
  }
  if (p.has_segments) {
    a[at.q_seg] = Fill::of(segment_runs(cu_q));
    a[at.k_seg] = Fill::of(segment_runs(cu_k));
  }
  return a;
}

}  // namespace

std::vector<std::string> recipe_sizes() { return {"seq", "heads", "head_dim", "batch", "kv_heads", "seq_q", "seq_k"}; }

Invocation recipe_invocation(bool backward, const std::map<std::string, std::int64_t>& sizes, DType dtype,
                             const nlohmann::json& options) {
  const std::string k = backward ? "flash_attention_bwd" : "flash_attention";
  const RecipeSizes size(k, sizes, recipe_sizes(), size_list);
  const bool both = sizes.count("seq_q") && sizes.count("seq_k");
  const std::int64_t seq = both ? 0 : size("seq", -1);
  const std::int64_t batch = size("batch", 1), heads = size("heads", -1), dim = size("head_dim", -1);
  const std::int64_t kv_heads = size("kv_heads", heads), sq = size("seq_q", seq), sk = size("seq_k", seq);

  Options o;
  std::string bias = "none";
  bool sinks = false, segments = false;
  for (const auto& item : options.items()) {
    const std::string& key = item.key();  // names lambdas can capture (Clang < 16: no bindings)
    const nlohmann::json& v = item.value();
    auto want = [&](bool ok, const char* what) {
      if (!ok) throw InvalidArgument(k + " option '" + key + "' must be " + what + ", got " + v.dump());
    };
    if (key == "causal") { want(v.is_boolean(), "a boolean"); o.causal = v.get<bool>(); }
    else if (key == "window_left") { want(v.is_number_integer(), "an integer"); o.window_left = v.get<std::int64_t>(); }
    else if (key == "window_right") { want(v.is_number_integer(), "an integer"); o.window_right = v.get<std::int64_t>(); }
    else if (key == "logits_soft_cap") { want(v.is_number(), "a number"); o.logits_soft_cap = v.get<double>(); }
    else if (key == "dropout") { want(v.is_number(), "a number"); o.dropout = v.get<double>(); }
    else if (key == "deterministic") { want(v.is_boolean(), "a boolean"); o.deterministic = v.get<bool>(); }
    else if (key == "softmax_scale") { want(v.is_number(), "a number"); o.softmax_scale = v.get<double>(); }
    else if (key == "dropout_seed") { want(v.is_number_unsigned(), "an unsigned integer"); o.dropout_seed = v.get<std::uint64_t>(); }
    else if (key == "diagonal_offset") { want(v.is_number_integer(), "an integer"); o.diagonal_offset = v.get<std::int64_t>(); }
    else if (key == "sinks") { want(v.is_boolean(), "a boolean"); sinks = v.get<bool>(); }
    else if (key == "segments") { want(v.is_boolean(), "a boolean"); segments = v.get<bool>(); }
    else if (key == "bias") {
      if (v.is_boolean()) bias = v.get<bool>() ? "full" : "none";
      else { want(v.is_string(), "a boolean or one of full, batch, heads, shared"); bias = v.get<std::string>(); }
      if (bias != "none" && bias != "full" && bias != "batch" && bias != "heads" && bias != "shared")
        throw InvalidArgument(k + " option 'bias' must be full, batch, heads or shared, got " + v.dump());
    } else {
      throw InvalidArgument(k + " has no option '" + key + "' (options: " + option_list + ")");
    }
  }
  const TensorSpec q{{batch, sq, heads, dim}, dtype}, kv{{batch, sk, kv_heads, dim}, dtype};
  TensorSpec b = absent(), s = absent(), qs = absent(), ks = absent();
  if (bias != "none")
    b = {{bias == "full" || bias == "batch" ? batch : 1, bias == "full" || bias == "heads" ? heads : 1, sq, sk}, dtype};
  if (sinks) s = {{heads}, DType::f32};
  if (segments) qs = {{batch, sq}, DType::i32}, ks = {{batch, sk}, DType::i32};
  const TensorSpec lse{{batch, heads, sq}, DType::f32};
  Invocation inv;
  if (!backward) {
    const TensorSpec args[] = {q, kv, kv, b, s, absent(), absent(), qs, ks, q, lse};
    inv = forward_invocation(args, o);
  } else {
    const TensorSpec args[] = {q, kv, kv, q, q, lse, b, s, absent(), absent(), qs, ks, q, kv, kv, b, s};
    inv = backward_invocation(args, o);
  }
  Registry::global().kernel(inv.kernel).validate(inv);  // throws with the argument named
  return inv;
}

Invocation FlashAttentionKernel::from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                                            const nlohmann::json& options) const {
  return recipe_invocation(false, sizes, dtype, options);
}

Invocation FlashAttentionBwdKernel::from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                                               const nlohmann::json& options) const {
  return recipe_invocation(true, sizes, dtype, options);
}

std::vector<Fill> FlashAttentionKernel::fills(const Invocation& inv, std::uint64_t /*seed*/) const {
  return fill(inv, args(), {fwd::cu_seqlens_q, fwd::cu_seqlens_k, fwd::q_segment_ids, fwd::kv_segment_ids});
}

std::vector<Fill> FlashAttentionBwdKernel::fills(const Invocation& inv, std::uint64_t /*seed*/) const {
  std::vector<Fill> a = fill(inv, args(), {bwd::cu_seqlens_q, bwd::cu_seqlens_k, bwd::q_segment_ids, bwd::kv_segment_ids});
  a[bwd::out] = a[bwd::lse] = Fill::none();  // derive() computes them
  return a;
}

void FlashAttentionBwdKernel::derive(const Invocation& inv, std::span<const Tensor> args) const {
  // out and lse must be the forward's for these q, k, v.
  const std::size_t from[] = {bwd::q,           bwd::k,           bwd::v,           bwd::bias,   bwd::softmax_aux,
                              bwd::cu_seqlens_q, bwd::cu_seqlens_k, bwd::q_segment_ids, bwd::kv_segment_ids,
                              bwd::out,         bwd::lse};
  run_on("flash_attention", inv, args, from);
}

}  // namespace ejk::kernels::flash_attention
