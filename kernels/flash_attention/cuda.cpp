// flash_attention and flash_attention_bwd on Hopper (flash_attention_wgmma.cu,
// flash_attention_bwd_wgmma.cu): f16 and bf16, head_dim 64 or 128, padded input, with causal and
// window masks, logits soft cap, GQA and the diagonal offset. Invocations with bias, sinks,
// segment ids, dropout or packed sequences, other head_dims and other GPUs run the OpenCL C
// implementation on the same device.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/cuda/cuda_device.hpp"
#include "common/builtin.hpp"
#include "ejk/error.hpp"
#include "flash_attention/flash_attention.hpp"
#include "flash_attention/program.hpp"

namespace ejk::kernels::flash_attention {
namespace {

constexpr const char* wgmma_source = "flash_attention/flash_attention_wgmma.cu";
constexpr const char* bwd_source = "flash_attention/flash_attention_bwd_wgmma.cu";

// What both directions take.
bool hopper_problem(const Problem& p, const DeviceInfo& dev) {
  if (dev.architecture != "sm_90") return false;  // wgmma, TMA and setmaxnreg: sm_90a
  return (p.dtype == DType::f16 || p.dtype == DType::bf16) && (p.head_dim == 64 || p.head_dim == 128) && !p.varlen &&
         !p.has_bias && !p.has_sinks && !p.has_segments && p.dropout == 0 &&
         std::max({p.seq_q, p.seq_k, p.batch * p.seq_q * p.heads}) < (std::int64_t{1} << 31);
}

// [batch, seq, heads, head_dim] as (head_dim, heads, seq, batch), copied in boxes of 64 head_dim
// columns of `rows` tokens of one head.
CUtensorMap token_map(cuda::CudaTarget& dev, const Problem& p, const Tensor& x, std::int64_t seq, std::int64_t heads,
                      std::int64_t rows) {
  const auto d = static_cast<std::uint64_t>(p.head_dim), h = static_cast<std::uint64_t>(heads),
             s = static_cast<std::uint64_t>(std::max<std::int64_t>(seq, 1));
  cuda::TensorMapShape shape;
  shape.dims = {d, h, s, static_cast<std::uint64_t>(p.batch)};
  shape.strides = {d * 2, h * d * 2, s * h * d * 2};
  shape.box = {64, 1, static_cast<std::uint32_t>(rows), 1};
  return dev.tensor_map(x.buffer(), shape);
}

// The band as the kernels take it: a causal mask is a right window of 0.
std::int64_t right_window(const Problem& p) {
  if (!p.causal) return p.window_right;
  return p.window_right < 0 ? 0 : std::min<std::int64_t>(p.window_right, 0);
}

std::string def(const char* name, std::int64_t v) { return std::string("-D") + name + "=" + std::to_string(v); }

// flash_attention_wgmma.cu's Params.
struct Params {
  std::int32_t seq_q, seq_k, heads, group;
  std::int32_t window_left, window_right;
  std::int32_t diagonal;
  float qscale, cap2;
  std::int32_t has_lse;
};

struct Tiles {
  std::int64_t cw, bk, stages, d;
  static Tiles of(const Config& c, const Problem& p) { return {c.get("cw"), c.get("block_k"), c.get("stages"), p.head_dim}; }
  std::int64_t threads() const { return (cw + 1) * 128; }
  // Q tile, K and V rings, 1 KiB to align them to the swizzle's period, the barriers.
  std::int64_t shared_bytes() const { return 64 * cw * d * 2 + 2 * stages * bk * d * 2 + 1024 + 8 * (1 + 4 * stages); }
  void check(const Config& c) const {
    const bool ok = (cw == 1 || cw == 2) && (bk == 64 || bk == 128) && stages >= 2 && stages <= 4 &&
                    shared_bytes() <= 227 * 1024;
    if (!ok) throw InvalidArgument("flash_attention on CUDA (wgmma): inconsistent config " + c.canonical());
  }
};

std::int32_t i32(std::int64_t v) { return static_cast<std::int32_t>(v); }

class CudaForward final : public Implementation {
 public:
  std::string_view kernel() const override { return "flash_attention"; }
  Backend backend() const override { return Backend::cuda; }
  // Before the OpenCL C implementation wherever it applies.
  int priority() const override { return 1; }
  std::vector<ArgDef> args() const override { return forward_args(); }
  std::vector<std::string> sources() const override { return {wgmma_source}; }

  bool supports(const Invocation& inv, const DeviceInfo& dev) const override {
    return hopper_problem(Problem::of(inv), dev);
  }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    ParamSpace s;
    s.param("cw", {1, 2})
        .param("block_k", {64, 128})
        .param("stages", {2, 3, 4})
        .constraint("64 * cw * head_dim * 2 + 4 * stages * block_k * head_dim + 1024 + 8 * (1 + 4 * stages) <= " +
                    std::to_string(227 * 1024))
        .bind(FlashAttentionKernel().vars(inv))
        .bind(device_vars(dev));
    return s;
  }

  // 128 query rows over two consumer warpgroups and 128-key blocks, double-buffered.
  Config heuristic(const Invocation&, const DeviceInfo&) const override {
    return Config{{"cw", 2}, {"block_k", 128}, {"stages", 2}};
  }

  void prepare(const Invocation& inv, const Config& config, Device& device) const override {
    const Problem p = Problem::of(inv);
    const Tiles t = Tiles::of(config, p);
    t.check(config);
    (void)program(p, t, cuda::cuda_target(device));
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    auto& dev = cuda::cuda_target(device);
    const Tiles t = Tiles::of(config, p);
    t.check(config);
    if (p.batch == 0 || p.seq_q == 0 || p.heads == 0) return;
    auto k = program(p, t, dev);
    CUtensorMap q_map = token_map(dev, p, args[fwd::q], p.seq_q, p.heads, 64 * t.cw);
    CUtensorMap k_map = token_map(dev, p, args[fwd::k], p.seq_k, p.kv_heads, t.bk);
    CUtensorMap v_map = token_map(dev, p, args[fwd::v], p.seq_k, p.kv_heads, t.bk);
    const ProgramOptions o = program_options(p, "flash_attention cuda");
    Params params{i32(p.seq_q), i32(p.seq_k), i32(p.heads), i32(p.group()), i32(p.window_left), i32(right_window(p)),
                  i32(p.diagonal(p.seq_q, p.seq_k)), o.qscale, o.cap2, is_absent(args[fwd::lse].spec()) ? 0 : 1};
    CUdeviceptr out = dev.pointer(args[fwd::out].buffer());
    CUdeviceptr lse = params.has_lse ? dev.pointer(args[fwd::lse].buffer()) : 0;
    void* launch_params[] = {&q_map, &k_map, &v_map, &out, &lse, &params};
    const auto tiles = static_cast<unsigned>((p.seq_q + 64 * t.cw - 1) / (64 * t.cw));
    dev.launch_cuda(*k, {tiles, static_cast<unsigned>(p.heads), static_cast<unsigned>(p.batch)},
                    {static_cast<unsigned>(t.threads()), 1, 1}, static_cast<std::size_t>(t.shared_bytes()),
                    launch_params);
  }

 private:
  static std::shared_ptr<cuda::CudaKernel> program(const Problem& p, const Tiles& t, cuda::CudaTarget& dev) {
    return dev.cuda_kernel(wgmma_source,
                           {def("D", t.d), def("CW", t.cw), def("BK", t.bk), def("STAGES", t.stages),
                            def("SOFTCAP", p.softcap > 0), def("BF16", p.dtype == DType::bf16)},
                           "ejk_fa_fwd_wgmma");
  }
};

// flash_attention_bwd_wgmma.cu's Params.
struct BwdParams {
  std::int32_t batch, seq_q, seq_k, heads, group;
  std::int32_t window_left, window_right;
  std::int32_t diagonal;
  float qscale, cap2, scale;
};

struct BwdTiles {
  std::int64_t cw, stages, d;
  static BwdTiles of(const Config& c, const Problem& p) { return {c.get("cw"), c.get("stages"), p.head_dim}; }
  std::int64_t threads() const { return (cw + 1) * 128; }
  // K and V of the block's keys, the Q and dout ring with their rows' lse and D, each consumer's
  // dS^T and dQ block, alignment, barriers.
  std::int64_t shared_bytes() const {
    return 2 * 64 * cw * d * 2 + stages * (2 * 64 * d * 2 + 512) + cw * (64 * 64 * 2 + 64 * d * 4) + 1024 +
           8 * (1 + 2 * stages);
  }
  void check(const Config& c) const {
    const bool ok = (cw == 1 || cw == 2) && stages >= 2 && stages <= 4 && shared_bytes() <= 227 * 1024;
    if (!ok) throw InvalidArgument("flash_attention_bwd on CUDA (wgmma): inconsistent config " + c.canonical());
  }
};

class CudaBackward final : public Implementation {
 public:
  std::string_view kernel() const override { return "flash_attention_bwd"; }
  Backend backend() const override { return Backend::cuda; }
  int priority() const override { return 1; }
  std::vector<ArgDef> args() const override { return backward_args(); }
  std::vector<std::string> sources() const override { return {bwd_source}; }

  // Its dq blocks meet in an f32 sum by TMA bulk reductions, in no fixed order: a deterministic
  // backward takes the OpenCL C passes instead.
  bool supports(const Invocation& inv, const DeviceInfo& dev) const override {
    const Problem p = Problem::of(inv);
    return hopper_problem(p, dev) && !p.deterministic;
  }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    ParamSpace s;
    s.param("cw", {1, 2})
        .param("stages", {2, 3, 4})
        .constraint("256 * cw * head_dim + stages * (256 * head_dim + 512) + cw * (8192 + 256 * head_dim) + 1024 + "
                    "8 * (1 + 2 * stages) <= " +
                    std::to_string(227 * 1024))
        .bind(FlashAttentionBwdKernel().vars(inv))
        .bind(device_vars(dev));
    return s;
  }

  // 128 keys a block over two consumer warpgroups, the query blocks double-buffered.
  Config heuristic(const Invocation&, const DeviceInfo&) const override { return Config{{"cw", 2}, {"stages", 2}}; }

  void prepare(const Invocation& inv, const Config& config, Device& device) const override {
    const Problem p = Problem::of(inv);
    const BwdTiles t = BwdTiles::of(config, p);
    t.check(config);
    (void)program(p, t, cuda::cuda_target(device), "ejk_fa_bwd_wgmma");
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    auto& dev = cuda::cuda_target(device);
    const BwdTiles t = BwdTiles::of(config, p);
    t.check(config);
    if (p.batch == 0 || p.heads == 0) return;
    // Query rows padded to the 64-row blocks: each block's lse and D are one bulk copy.
    const std::int64_t rows = p.batch * p.seq_q * p.heads, seq_pad = (p.seq_q + 63) / 64 * 64;
    const std::int64_t padded_rows = p.batch * seq_pad * p.heads;
    auto stats = dev.scratch(static_cast<std::size_t>(std::max<std::int64_t>(2 * padded_rows, 1)) * 4);
    auto dq_acc = dev.scratch(static_cast<std::size_t>(std::max<std::int64_t>(padded_rows * p.head_dim, 1)) * 4);
    CUdeviceptr stats_p = dev.pointer(*stats), dq_acc_p = dev.pointer(*dq_acc);
    CUdeviceptr out = dev.pointer(args[bwd::out].buffer()), dout = dev.pointer(args[bwd::dout].buffer());
    CUdeviceptr lse = dev.pointer(args[bwd::lse].buffer()), dq = dev.pointer(args[bwd::dq].buffer());
    CUdeviceptr dk = dev.pointer(args[bwd::dk].buffer()), dv = dev.pointer(args[bwd::dv].buffer());

    int pad = static_cast<int>(seq_pad);
    if (padded_rows > 0) {
      int n_rows = static_cast<int>(padded_rows), seq_q = static_cast<int>(p.seq_q), heads = static_cast<int>(p.heads);
      void* prep[] = {&out, &dout, &lse, &stats_p, &dq_acc_p, &n_rows, &seq_q, &pad, &heads};
      dev.launch_cuda(*program(p, t, dev, "ejk_fa_bwd_prep"), {static_cast<unsigned>((padded_rows + 7) / 8), 1, 1},
                      {256, 1, 1}, 0, prep);
    }

    CUtensorMap q_map = token_map(dev, p, args[bwd::q], p.seq_q, p.heads, 64);
    CUtensorMap do_map = token_map(dev, p, args[bwd::dout], p.seq_q, p.heads, 64);
    CUtensorMap k_map = token_map(dev, p, args[bwd::k], p.seq_k, p.kv_heads, 64 * t.cw);
    CUtensorMap v_map = token_map(dev, p, args[bwd::v], p.seq_k, p.kv_heads, 64 * t.cw);
    const ProgramOptions o = program_options(p, "flash_attention_bwd cuda");
    BwdParams params{i32(p.batch), i32(p.seq_q), i32(p.seq_k), i32(p.heads), i32(p.group()), i32(p.window_left),
                     i32(right_window(p)), i32(p.diagonal(p.seq_q, p.seq_k)), o.qscale, o.cap2,
                     static_cast<float>(p.scale)};
    void* main[] = {&q_map, &k_map, &v_map, &do_map, &stats_p, &pad, &dq_acc_p, &dk, &dv, &params};
    dev.launch_cuda(*program(p, t, dev, "ejk_fa_bwd_wgmma"),
                    {static_cast<unsigned>((p.seq_k + 64 * t.cw - 1) / (64 * t.cw)), static_cast<unsigned>(p.kv_heads),
                     static_cast<unsigned>(p.batch)},
                    {static_cast<unsigned>(t.threads()), 1, 1}, static_cast<std::size_t>(t.shared_bytes()), main);

    if (rows > 0) {
      long long count = rows * p.head_dim;
      float scale = static_cast<float>(p.scale);
      int seq_q = static_cast<int>(p.seq_q), heads = static_cast<int>(p.heads);
      void* finish[] = {&dq_acc_p, &dq, &count, &seq_q, &pad, &heads, &scale};
      dev.launch_cuda(*program(p, t, dev, "ejk_fa_bwd_dq"), {static_cast<unsigned>((count / 2 + 255) / 256), 1, 1},
                      {256, 1, 1}, 0, finish);
    }
  }

 private:
  static std::shared_ptr<cuda::CudaKernel> program(const Problem& p, const BwdTiles& t, cuda::CudaTarget& dev,
                                                   std::string_view name) {
    return dev.cuda_kernel(bwd_source,
                           {def("D", t.d), def("CW", t.cw), def("STAGES", t.stages), def("SOFTCAP", p.softcap > 0),
                            def("BF16", p.dtype == DType::bf16)},
                           name);
  }
};

}  // namespace

EJK_BUILTIN(implementations, "flash_attention/cuda") {
  r.add(std::make_shared<CudaForward>());
  r.add(std::make_shared<CudaBackward>());
}

}  // namespace ejk::kernels::flash_attention
