#pragma once
// The decode engine's implementations, one per backend file, each bound to one kernel the engine
// runs: its name, its argument list and the function that validates an invocation into an
// Engine. Those kernels declare themselves from their own folders (a Client each); every backend
// file registers an implementation for every client.
#include <memory>
#include <string>
#include <vector>

#include "decode_attention/engine.hpp"
#include "ejk/kernel.hpp"

namespace ejk::kernels::decode_attention {

using EngineOf = Engine (*)(const Invocation&);

struct Binding {
  std::string kernel;
  std::vector<ArgDef> args;
  EngineOf engine = nullptr;
};

// Declares a kernel the engine runs; constructed at namespace scope in that kernel's folder.
class Client {
 public:
  explicit Client(Binding b);
};
// Every client, by kernel name.
std::vector<Binding> clients();

// Splits for a device with `parallel` concurrent workgroups (or threads): enough workgroups to
// fill it twice over (two waves), at most one split per 4 tiles of the longest context, a power
// of two <= 32.
std::int64_t heuristic_splits(const Engine& e, std::int64_t block_q, std::int64_t block_k, std::int64_t parallel);

// Query tokens per workgroup for ragged queries: enough to cover max_q_len, at most 8, and at
// most 16 rows (query heads of a kv head times tokens) per workgroup; 1 without ragged queries.
std::int64_t query_block(const Engine& e);
// Work-items for a workgroup of `rows` query rows: at least `least`, and enough that each holds
// at most 8 accumulators (rows x head_dim class / threads), at most 256.
std::int64_t heuristic_threads(const Engine& e, std::int64_t block_q, std::int64_t least);

}  // namespace ejk::kernels::decode_attention
