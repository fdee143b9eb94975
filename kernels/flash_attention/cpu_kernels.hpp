#pragma once
// The CPU flash attention's per-task routines, built once per ISA (cpu_kernels_<isa>.cpp with
// their own -m flags) and picked at run time. cpu.cpp plans a call into a Plan (plain data:
// pointers, sizes, task tables) and spreads the tasks over the thread pool; a task routine
// touches only the Plan, the arrays it points to and the per-thread scratch it is given.
#include <cstdint>

#include "ejk/dtype.hpp"

namespace ejk::kernels::flash_attention::cpu {

// Row buffers on the stack hold a head_dim rounded up to any vector width.
constexpr std::int64_t max_head_dim_padded = 256;

struct Seq {
  std::int64_t q_start, q_len, k_start, k_len;
  std::int64_t block0;  // first packed key block of this sequence
};

// A unit of parallel work: sequence, head (query head, or kv head for the dk/dv pass) and
// block index (query block, or key block for the packs and the dk/dv pass).
struct Task {
  std::int32_t seq, head, block;
};

struct Plan {
  // Sizes.
  std::int64_t heads, kv_heads, group, head_dim;
  std::int64_t dp;  // head_dim rounded up to the vector width: row stride of packed rows
  std::int64_t bq, bk;
  std::int64_t seq_q, seq_k;  // padded lengths (bias rows and columns, lse rows)
  std::int64_t total_q;
  bool varlen;
  DType dtype;

  // Inputs (dtype unless noted).
  const void *q, *k, *v;
  const void* bias;  // nullptr when absent
  DType bias_dtype;
  std::int64_t bias_batch, bias_heads;
  const float* sinks;  // f32 [heads] in natural-log units; nullptr when absent
  const std::int32_t *q_seg, *k_seg;  // nullptr when absent
  const Seq* seqs;

  // Options, in base-2 units: logits z are kept as z * log2(e).
  bool causal;
  std::int64_t window_left, window_right;
  std::int64_t diagonal_offset;  // added to the diagonal k_len - q_len
  float qscale;      // q is multiplied by this when packed
  float bias_scale;  // bias is multiplied by this before (optional) capping
  float cap2;        // logits_soft_cap * log2(e); 0: no cap (then t -> cap2 * tanh(t))
  float grad_scale;  // softmax_scale / qscale: turns products with packed q into dk
  float softmax_scale;
  bool dropout;
  std::uint32_t threshold, seed_lo, seed_hi;
  float keep_scale;  // 1 / (1 - p)

  // Packed key blocks (f32), block g of kv head h at offset (g * kv_heads + h) * block size:
  float* kt;  // [D][bk]  keys transposed
  float* vp;  // [bk][dp] values (forward)
  float* kp;  // [bk][dp] keys (backward)
  float* vt;  // [D][bk]  values transposed (backward)

  // Forward outputs.
  void* out;
  float* lse;

  // Backward.
  const void *o, *dout;
  const float* lse_in;
  float* delta;      // f32 [heads][total_q]: dout . out per row
  float* sink_part;  // f32 per prep task: that task's contribution to dsoftmax_aux
  void *dq, *dk, *dv;
  float* dbias;  // f32 accumulator with bias's shape; nullptr without bias

  const Task* tasks;  // the current pass's tasks
};

struct Isa {
  int lanes;
  // Floats of per-thread scratch a task of this plan needs.
  std::int64_t (*scratch)(const Plan&);
  // Packs block tasks[i] = (seq, kv head, key block): kt, vp (forward) or kt, kp, vt (backward).
  void (*pack_forward)(const Plan&, std::int64_t i);
  void (*pack_backward)(const Plan&, std::int64_t i);
  // tasks[i] = (seq, head, query block).
  void (*forward)(const Plan&, std::int64_t i, float* scratch);
  void (*backward_prep)(const Plan&, std::int64_t i);
  void (*backward_dq)(const Plan&, std::int64_t i, float* scratch);
  // tasks[i] = (seq, kv head, key block).
  void (*backward_dkdv)(const Plan&, std::int64_t i, float* scratch);
};

const Isa& avx512();
const Isa& avx2();
const Isa& generic();

}  // namespace ejk::kernels::flash_attention::cpu
