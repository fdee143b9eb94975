#include "flash_attention/program.hpp"

#include <string>

#include "ejk/error.hpp"

namespace ejk::kernels::flash_attention {
namespace {

std::uint32_t u32(std::int64_t v) { return static_cast<std::uint32_t>(v); }

}  // namespace

std::uint32_t storage_code(DType t, std::string_view who) {
  switch (t) {
    case DType::f32: return 0;
    case DType::f16: return 1;
    case DType::bf16: return 2;
    default: throw InvalidArgument(std::string(who) + ": dtype " + std::string(to_string(t)) + " is not supported");
  }
}

std::int64_t head_dim_class(std::int64_t d) {
  std::int64_t c = 32;
  while (c < d) c *= 2;
  return c;
}

ProgramOptions program_options(const Problem& p, std::string_view who) {
  namespace f = program_flag;
  ProgramOptions c{};
  c.batch = u32(p.batch);
  c.seq_q = u32(p.seq_q);
  c.seq_k = u32(p.seq_k);
  c.total_q = u32(p.total_q);
  c.heads = u32(p.heads);
  c.kv_heads = u32(p.kv_heads);
  c.group = u32(p.group());
  c.flags = (p.causal ? f::causal : 0u) | (p.varlen ? f::varlen : 0u) | (p.has_bias ? f::bias : 0u) |
            (p.has_sinks ? f::sinks : 0u) | (p.has_segments ? f::segments : 0u) | (p.dropout > 0 ? f::dropout : 0u) |
            (p.softcap > 0 ? f::softcap : 0u);
  c.window_left = static_cast<std::int32_t>(p.window_left);
  c.window_right = static_cast<std::int32_t>(p.window_right);
  c.diagonal_offset = static_cast<std::int32_t>(p.diagonal_offset);
  // Logits in base 2, as the CPU kernels keep them: with a cap, t = u / cap and z log2 e = cap
  // log2 e tanh(t); without, z log2 e = u log2 e.
  constexpr double log2e = 1.4426950408889634;
  if (p.softcap > 0) {
    c.qscale = static_cast<float>(p.scale / p.softcap);
    c.bias_scale = static_cast<float>(1.0 / p.softcap);
    c.cap2 = static_cast<float>(p.softcap * log2e);
  } else {
    c.qscale = static_cast<float>(p.scale * log2e);
    c.bias_scale = static_cast<float>(log2e);
  }
  c.softmax_scale = static_cast<float>(p.scale);
  c.grad_scale = static_cast<float>(p.scale / static_cast<double>(c.qscale));
  c.keep_scale = static_cast<float>(1.0 / (1.0 - p.dropout));
  c.threshold = p.threshold;
  c.seed_lo = static_cast<std::uint32_t>(p.seed);
  c.seed_hi = static_cast<std::uint32_t>(p.seed >> 32);
  c.bias_batch = u32(p.has_bias ? p.bias_batch : 1);
  c.bias_heads = u32(p.has_bias ? p.bias_heads : 1);
  c.head_dim = u32(p.head_dim);
  c.dtype = storage_code(p.dtype, who);
  c.dtypes = (p.has_bias ? storage_code(p.bias_dtype, who) : 0) | (p.has_sinks ? storage_code(p.sinks_dtype, who) : 0) << 4;
  return c;
}

Config renamed_config(const Config& c, const TileNames& names) {
  Config r;
  for (const auto& [name, value] : c.values()) r.set(name == names.q ? "block_q" : name == names.k ? "block_k" : name, value);
  return r;
}

void check_32bit_indices(const Problem& p, std::string_view who) {
  const double limit = 4294967295.0;
  const double q = static_cast<double>(p.total_q) * static_cast<double>(p.heads) * static_cast<double>(p.head_dim);
  const double k = static_cast<double>(p.total_k) * static_cast<double>(p.kv_heads) * static_cast<double>(p.head_dim);
  const double b = p.has_bias ? static_cast<double>(p.batch) * static_cast<double>(p.heads) * static_cast<double>(p.seq_q) *
                                    static_cast<double>(p.seq_k)
                              : 0.0;
  if (q > limit || k > limit || b > limit)
    throw InvalidArgument(std::string(who) + ": arrays of more than 2^32 elements (q " + std::to_string(q) + ", k " +
                          std::to_string(k) + ", bias planes " + std::to_string(b) + ") are not supported");
}

}  // namespace ejk::kernels::flash_attention
