#pragma once
// What the OpenCL and Vulkan programs of flash attention read about an invocation: one block of
// 4-byte words (OpenCL's by-value Params, the leading words of Vulkan's push constants) built
// from a Problem, the flag bits in it, the storage dtype codes and the head_dim size classes the
// programs are specialised for.
#include <cstdint>
#include <string>
#include <string_view>

#include "flash_attention/flash_attention.hpp"

namespace ejk::kernels::flash_attention {

// flash_attention_common.cl's Params and flash_attention.glsl's push block start with these words.
struct ProgramOptions {
  std::uint32_t batch, seq_q, seq_k, total_q;
  std::uint32_t heads, kv_heads, group, flags;
  std::int32_t window_left, window_right;
  float qscale, bias_scale, cap2, softmax_scale, grad_scale, keep_scale;
  std::uint32_t threshold, seed_lo, seed_hi;
  std::uint32_t bias_batch, bias_heads, dtypes;
  std::uint32_t extra, head_dim, dtype;
  std::int32_t diagonal_offset;
};
static_assert(sizeof(ProgramOptions) == 104, "the programs' options are 26 words");

// The programs' F_* flags.
namespace program_flag {
constexpr std::uint32_t causal = 1, varlen = 2, bias = 4, sinks = 8, segments = 16, dropout = 32, softcap = 64,
                        dbias_scratch = 128, finish_dbias = 256, list_batch = 512, list_heads = 1024;
}

// A block layout for the passes to walk instead of every tile (block_sparse_attention's, see
// block_sparse_attention.hpp): blocks of block_q queries and block_k keys; lists of the live key
// blocks of each query block (kv_*) and the transpose (q_*, the backward's dk/dv pass), with rows
// per sequence and/or per head or one row set for all. The passes' tiles must divide the blocks.
struct BlockLists {
  std::int64_t block_q = 0, block_k = 0;
  bool per_batch = false, per_head = false;
  const Tensor* kv_counts = nullptr;
  const Tensor* kv_indices = nullptr;
  const Tensor* q_counts = nullptr;
  const Tensor* q_indices = nullptr;
  std::uint32_t flags() const {
    return (per_batch ? program_flag::list_batch : 0u) | (per_head ? program_flag::list_heads : 0u);
  }
};

// The names a space gives the scalar passes' tile parameters: flash_attention's own block_q and
// block_k, or others where those names mean something else (block_sparse_attention's layout).
struct TileNames {
  std::string q = "block_q", k = "block_k";
};

// A config of the passes with their tile parameters named `names` as flash_attention names them.
Config renamed_config(const Config& c, const TileNames& names);

// Logits in base 2 with the scales folded as the programs expect; `who` names the backend in
// errors ("flash_attention opencl").
ProgramOptions program_options(const Problem& p, std::string_view who);

// 0 f32, 1 f16, 2 bf16; throws InvalidArgument naming `who` for any other dtype.
std::uint32_t storage_code(DType t, std::string_view who);

// head_dim rounded up to 32, 64, 128 or 256: the programs' DMAX. head_dim itself is a run-time
// value, so the few classes bound the programs built per config.
std::int64_t head_dim_class(std::int64_t d);

// The scalar passes' tile geometry (block_q, block_k, threads_x, threads_y and the head_dim
// class) and the local (shared) memory each pass declares, in bytes: flash_attention.cl's and
// flash_attention.glsl's layouts, which are the same.
struct TileGeometry {
  std::int64_t bq, bk, rx, ry, d;
  std::int64_t ds() const { return (d + rx - 1) / rx * rx + 1; }  // padded row stride, odd
  std::int64_t forward_bytes() const { return 4 * (bq * ds() + bk * ds() + bq * (bk + 1) + bq * rx); }
  std::int64_t dkdv_bytes() const { return 4 * (2 * bk * ds() + bq * ds() + 2 * bq * (bk + 1) + 2 * bq); }
  std::int64_t dq_bytes() const { return 4 * (2 * bq * ds() + bk * ds() + bq * (bk + 1) + 2 * bq); }
};

// The programs index with 32-bit integers: throws InvalidArgument naming `who` for larger arrays.
void check_32bit_indices(const Problem& p, std::string_view who);

}  // namespace ejk::kernels::flash_attention
