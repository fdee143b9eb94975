// block_sparse_attention on OpenCL. Variants "scalar" and "mma" (NVIDIA tensor cores) are
// flash attention's passes walking the layout's lists (flash_passes.hpp), where their tiles
// divide the layout's blocks; variant "tiles" is block_sparse_attention.cl's kernels:
//   forward   bsa_fwd, one group of block_m work-items per (query tile, head, batch);
//   backward  bsa_dq (the forward's grid, its own tile dq_block_m x dq_block_n) then bsa_dkdv,
//             one group of block_n work-items per (key tile, kv head, batch) walking the
//             transposed lists, block_m queries staged at a time.
// The tile sizes and head_dim are -D options (they size local memory and registers); shapes,
// the dtype and the options are a Params struct, so one program serves every dtype.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/clc/clc_device.hpp"
#include "block_sparse_attention/block_sparse_attention.hpp"
#include "block_sparse_attention/tiles.hpp"
#include "common/builtin.hpp"
#include "ejk/error.hpp"
#include "flash_attention/opencl.hpp"

namespace ejk::kernels::block_sparse_attention {
namespace {

constexpr const char* source_key = "block_sparse_attention/block_sparse_attention.cl";

// Mirrors the program's Params.
struct Params {
  std::int32_t batch, seq_q, seq_k, heads;
  std::int32_t kv_heads, block_q, block_k, nbq;
  std::int32_t nbk, lb, lh;
  std::uint32_t flags, dtype;
  float scale, cap;
};

std::shared_ptr<clc::Kernel> program(clc::Device& dev, const Problem& p, const Tile& t, const char* name) {
  const std::string options = " -DBLOCK_M=" + std::to_string(t.bm) + " -DBLOCK_N=" + std::to_string(t.bn) +
                              " -DHEAD_DIM=" + std::to_string(p.head_dim);
  return dev.kernel(source_key, options, name);
}

std::size_t z(std::int64_t v) { return static_cast<std::size_t>(v); }

ParamSpace space_of(const Invocation& inv, const DeviceInfo& dev, bool backward) {
  const Vars vars = backward ? BlockSparseAttentionBwdKernel().vars(inv) : BlockSparseAttentionKernel().vars(inv);
  const Problem p = Problem::of(inv);
  return device_space(backward, vars, dev, [&](ParamSpace& s) {
    flash_attention::add_opencl_params(s, {std::string("tiles")}, flash_problem(p), dev, clc::is_cpu(dev), flash_tile_names);
  });
}

Config heuristic_of(const Invocation& inv, const DeviceInfo& dev, bool backward) {
  const bool cpu = clc::is_cpu(dev);
  return device_heuristic(space_of(inv, dev, backward), inv, cpu, backward,
                          flash_attention::opencl_candidates(backward, cpu, flash_attention::vector_red(dev), flash_tile_names));
}


class OpenCLForward final : public clc::Implementation {
 public:
  using clc::Implementation::Implementation;
  std::string_view kernel() const override { return "block_sparse_attention"; }
  std::vector<ArgDef> args() const override { return forward_args(); }
  std::vector<std::string> sources() const override {
    return {source_key, clc::prelude_source, "flash_attention/flash_attention.cl", "flash_attention/flash_attention_mma.cl",
            "flash_attention/flash_attention_common.cl", "common/philox.h"};
  }
  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override { return space_of(inv, dev, false); }
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override { return heuristic_of(inv, dev, false); }
  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    if (run_passes(p, config, args, device, &flash_attention::opencl_forward, &flash_attention::opencl_backward)) return;
    const Tile t = read_tile(p, config, "block_sparse_attention opencl");
    if (p.batch * p.seq_q == 0) return;
    auto& dev = clc::clc_device(device);
    const Params params = make_params<Params>(p);
    auto k = program(dev, p, t, "bsa_fwd");
    dev.launch(*k, clc::Range(z((p.seq_q + t.bm - 1) / t.bm * t.bm), z(p.heads), z(p.batch)),
               clc::Range(z(t.bm), 1, 1), clc::StructArg::of(params), args[fwd::q], args[fwd::k], args[fwd::v],
               args[fwd::kv_block_counts], args[fwd::kv_block_indices], args[fwd::q_segment_ids],
               args[fwd::kv_segment_ids], args[fwd::out], args[fwd::lse]);
  }
};

class OpenCLBackward final : public clc::Implementation {
 public:
  using clc::Implementation::Implementation;
  std::string_view kernel() const override { return "block_sparse_attention_bwd"; }
  std::vector<ArgDef> args() const override { return backward_args(); }
  std::vector<std::string> sources() const override {
    return {source_key, clc::prelude_source, "flash_attention/flash_attention.cl", "flash_attention/flash_attention_mma.cl",
            "flash_attention/flash_attention_common.cl", "common/philox.h"};
  }
  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override { return space_of(inv, dev, true); }
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override { return heuristic_of(inv, dev, true); }
  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    if (run_passes(p, config, args, device, &flash_attention::opencl_forward, &flash_attention::opencl_backward)) return;
    const Tile t = read_tile(p, config, "block_sparse_attention_bwd opencl");
    const Tile tq = read_tile(p, config, "block_sparse_attention_bwd opencl", "dq_");
    auto& dev = clc::clc_device(device);
    const Params params = make_params<Params>(p);
    if (p.batch * p.seq_q > 0) {
      auto dq = program(dev, p, tq, "bsa_dq");
      dev.launch(*dq, clc::Range(z((p.seq_q + tq.bm - 1) / tq.bm * tq.bm), z(p.heads), z(p.batch)),
                 clc::Range(z(tq.bm), 1, 1), clc::StructArg::of(params), args[bwd::q], args[bwd::k], args[bwd::v],
                 args[bwd::out], args[bwd::dout], args[bwd::lse], args[bwd::kv_block_counts],
                 args[bwd::kv_block_indices], args[bwd::q_segment_ids], args[bwd::kv_segment_ids], args[bwd::dq]);
    }
    if (p.batch * p.seq_k > 0) {
      auto dkdv = program(dev, p, t, "bsa_dkdv");
      dev.launch(*dkdv, clc::Range(z((p.seq_k + t.bn - 1) / t.bn * t.bn), z(p.kv_heads), z(p.batch)),
                 clc::Range(z(t.bn), 1, 1), clc::StructArg::of(params), args[bwd::q], args[bwd::k], args[bwd::v],
                 args[bwd::out], args[bwd::dout], args[bwd::lse], args[bwd::q_block_counts],
                 args[bwd::q_block_indices], args[bwd::q_segment_ids], args[bwd::kv_segment_ids], args[bwd::dk],
                 args[bwd::dv]);
    }
  }
};

}  // namespace

EJK_BUILTIN(implementations, "block_sparse_attention/opencl") {
  clc::add<OpenCLForward>(r);
  clc::add<OpenCLBackward>(r);
}

}  // namespace ejk::kernels::block_sparse_attention
