#pragma once
// The decode engine's implementations, one per backend file, each bound to one kernel the engine
// runs: its name, its argument list and the function that validates an invocation into an
// Engine. Those kernels declare themselves from their own folders (a Client each); every backend
// file registers an implementation for every client.
#include <initializer_list>
#include <memory>
#include <optional>
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

// head_dim rounded up to 32, 64, 128 or 256: the device passes' row width.
std::int64_t dim_class(std::int64_t head_dim);

// The register-streamed pass 1 (config stream = 1: decode_stream in decode_attention.cl and
// decode_attention.glsl) has one geometry on every backend: with dm = dim_class(head_dim),
// work-item tid owns the 8-element slice tid % (dm / 8) of every row and block_k * (dm / 8) /
// threads keys of each tile (stream_keys). stream_fits: whole slices a work-item and at least
// one key each.
std::int64_t stream_keys(std::int64_t block_k, std::int64_t dm, std::int64_t threads);
bool stream_fits(std::int64_t block_k, std::int64_t dm, std::int64_t threads);
// Its constraint and its shared memory in bytes, as ParamSpace text over threads, block_k,
// head_dim_class and dtype_size for workgroups of `rows` query rows (an expression): whole
// slices, 1 to 4 keys a work-item, and the rows' query slices and accumulators plus two tiles of
// raw words within ~160 registers; shared memory for the larger of the partial dots and the key
// groups' sums, scores, probabilities, two sets of row maxima and the rows' key bounds.
std::string stream_constraint(const std::string& rows);
std::string stream_shared(const std::string& rows);
// A GPU's config for it: four, then two, then one key per work-item over `widths` work-items in
// that order, the first that `space` admits, with splits for `parallel` concurrent workgroups.
std::optional<Config> stream_heuristic(const Engine& e, const ParamSpace& space, std::int64_t block_q,
                                       std::initializer_list<std::int64_t> widths, std::int64_t parallel);

}  // namespace ejk::kernels::decode_attention
