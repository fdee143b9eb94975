#pragma once
// The split-K decode engine behind page_attention, ragged_decode_attention and
// ragged_page_attention: a few query rows per sequence attend to that sequence's keys in a KV
// cache. Each kernel's host side validates its own arguments and describes them as an Engine;
// every backend runs an Engine the same way:
//
//   addressing  key token t of sequence s, kv head g lies either in a page of a block table
//               (paged: key_cache [num_blocks, kv_heads, block_size, head_dim], page
//               block_tables[s, t / block_size], row t % block_size) or in a contiguous array
//               (contiguous: key [batch, seq, kv_heads, head_dim], row s * seq + t).
//   ranges      sequence s attends keys [kv_begin[s], kv_end[s]) (kv_begin 0 when absent) with
//               query tokens [q_loc[s], q_loc[s+1]) (one token, s, when q_loc is absent).
//               Query i of q_len sits at position pos = kv_end - q_len + i (bottom-right
//               aligned) and sees the keys kv_begin <= t <= pos, and with a sliding window W
//               only t > pos - W.
//   pass 1      one workgroup (CPU: task) per (split, kv head, query block): all query heads of
//               that kv head (and block_q query tokens) read each key once; the keys of the block
//               are cut into `splits` chunks of whole tiles of block_k keys. Each writes its rows'
//               running max m, sum l (base 2) and unnormalised accumulator to f32 scratch.
//   pass 2      per (token, head): merge the splits by log-sum-exp, add the sink, normalise.
//
// A row that sees no key (an empty sequence, a window before the context) gives 0, with or
// without a sink (the sink has no value).
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/dtype_code.hpp"
#include "ejk/kernel.hpp"

namespace ejk::kernels::decode_attention {

enum class Layout { paged, contiguous };

// Positions of the engine's arrays among a kernel's arguments; -1 where the kernel has none.
struct Slots {
  int q = -1, k = -1, v = -1, block_tables = -1, kv_begin = -1, kv_end = -1, q_loc = -1, sinks = -1, out = -1;
};

constexpr std::int64_t max_head_dim = 256;

struct Engine {
  std::string kernel;              // for messages
  std::vector<std::string> names;  // argument names, in the kernel's order
  Slots at;
  Layout layout = Layout::paged;
  std::int64_t num_seqs = 0;   // sequences attended
  std::int64_t tokens = 0;     // query tokens (q's first dimension)
  std::int64_t heads = 0, kv_heads = 0, head_dim = 0;
  DType dtype = DType::f32;
  std::int64_t num_blocks = 0, block_size = 0, max_blocks = 0;  // paged
  std::int64_t seq_len = 0;                                     // contiguous
  bool varlen = false;    // q_loc given: sequences own runs of query tokens
  std::int64_t max_q_len = 1;  // longest run of query tokens (an upper bound)
  std::int64_t window = 0;     // 0: no sliding window
  double softcap = 0.0;        // 0: off
  double scale = 0.0;          // resolved softmax scale
  bool sinks = false;

  std::int64_t group() const { return heads / kv_heads; }
  // Most keys one sequence can address.
  std::int64_t capacity() const { return layout == Layout::paged ? max_blocks * block_size : seq_len; }
  const std::string& name(int slot) const { return names[static_cast<std::size_t>(slot)]; }
};

// The host's view of the per-sequence ranges, read from the index arrays and checked.
struct Ranges {
  std::vector<std::int64_t> q_start, q_len, kv_begin, kv_end;
};

// Index array values (empty spans for absent arrays). Throws InvalidArgument naming the array,
// the sequence and the value: block table entries outside [0, num_blocks) (only those a context
// reaches), contexts longer than the table or the array covers, negative lengths, start > end,
// query_start_loc not starting at 0, decreasing or not ending within the tokens, a sequence with
// more query tokens than keys.
Ranges ranges(const Engine& e, std::span<const std::int64_t> kv_begin, std::span<const std::int64_t> kv_end,
              std::span<const std::int64_t> q_loc, std::span<const std::int64_t> block_tables);

// The same from HostArrays in the kernel's argument order.
Ranges ranges(const Engine& e, const HostArrays& args);

// Double-precision reference: the out argument's final values (rows of tokens no sequence owns
// keep their initial contents).
std::vector<double> reference(const Engine& e, const HostArrays& args);
// The same at query rows of 4 (sequence, kv head) pairs spread over both, 8 rows each (over the
// pair's query heads and tokens), reading the index arrays whole and only those rows' queries
// and their sequence's keys and values for that kv head.
std::vector<SampledOutput> sampled_reference(const Engine& e, const ArgReader& read, const Invocation& inv);

// f32 accumulation over up to `keys` probabilities and head_dim products: the dtype's tolerance
// grows like the square root of the longer of the two (as flash_attention's).
double tolerance(const Engine& e, std::int64_t keys);

// Bytes a call moves once: keys and values of keys_per_seq keys per sequence, queries and
// outputs, and index_words 4-byte index entries.
double moved_bytes(const Engine& e, std::int64_t keys_per_seq, std::int64_t index_words);
// Keys per sequence a paged cache can hold: the table's reach, at most the whole cache.
inline std::int64_t paged_keys(const Engine& e) { return std::min(e.capacity(), e.num_blocks * e.block_size); }

// Named sizes for constraints and heuristics.
Vars vars(const Engine& e);

// How the device passes (decode_attention.cl, .glsl, .cu) and the CPU's are told an Engine:
// storage dtype codes (0 f32, 1 f16, 2 bf16), flags, and the logits in base 2: z = cap2 *
// tanh(qscale * q.k) with a soft cap, qscale * q.k (cap2 0) without.
enum Flag : int { paged_flag = 1, has_begin_flag = 2, varlen_flag = 4, sinks_flag = 8 };
int flags(const Engine& e);
struct LogitScales {
  float qscale = 0.f, cap2 = 0.f;
};
LogitScales logit_scales(const Engine& e);
// The call's argument at `slot`, or where the kernel has none (-1), another one: a placeholder
// the passes bind but never read.
inline const Tensor& arg_at(const Engine& e, std::span<const Tensor> args, int slot) {
  return args[static_cast<std::size_t>(slot >= 0 ? slot : e.at.kv_end)];
}

// Rows (query head, token) that one workgroup of pass 1 holds.
inline std::int64_t rows(const Engine& e, std::int64_t block_q) { return e.group() * block_q; }

// Launch geometry of pass 1 shared by the backends: workgroups along query blocks.
inline std::int64_t query_blocks(const Engine& e, std::int64_t block_q) {
  return e.varlen ? e.tokens / block_q + e.num_seqs : e.num_seqs;
}

// Helpers for the kernels' host sides.
std::string describe(const std::string& name, const TensorSpec& s);
// Throws InvalidArgument "<kernel>: <name> <shape> <dtype> must be <want>" unless it matches.
void expect_index(const Engine& e, int slot, const TensorSpec& s, const Shape& shape, const std::string& what);
// A float storage dtype (f32, f16, bf16), else InvalidArgument naming the argument.
void expect_float(const Engine& e, int slot, const TensorSpec& s);
// Reads `name` from options/scalars with type checks; messages name the kernel and the option.
double number_option(const std::string& kernel, const nlohmann::json& from, const char* name, double fallback);
std::int64_t integer_option(const std::string& kernel, const nlohmann::json& from, const char* name,
                            std::int64_t fallback);
// Rejects option keys outside `allowed`, listing them.
void known_keys(const std::string& kernel, const nlohmann::json& from, const char* kind,
                std::initializer_list<const char*> allowed);

// A kernel's argument list from its argument names; the one at `out` is the output.
std::vector<ArgDef> arg_defs(const std::vector<std::string>& names, int out);

// The host-built values of fills (index arrays), empty for the others: what ranges() reads.
HostArrays index_values(const std::vector<Fill>& fills);
// Block tables [num_seqs, max_blocks] naming pages in a shuffled order: distinct pages while
// num_blocks allows, repeated ones after (sequences may share pages).
std::vector<double> shuffled_tables(std::int64_t num_seqs, std::int64_t max_blocks, std::int64_t num_blocks,
                                    std::uint64_t seed);

}  // namespace ejk::kernels::decode_attention
