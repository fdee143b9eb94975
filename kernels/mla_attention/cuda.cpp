// mla_decode on CUDA tensor cores (sm_80 and later), f16 and bf16: the OpenCL C program's
// absorb and combine passes around a tensor-core attention pass of its own (mla_decode.cu),
// which reads each tile of the latent cache once for 16 heads. Other dtypes and shapes (latent
// rank a multiple of 64, row width of 16, pages of 32 rows) run the OpenCL C implementation.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/cuda/cuda_device.hpp"
#include "common/builtin.hpp"
#include "ejk/error.hpp"
#include "mla_attention/device_space.hpp"
#include "mla_attention/mla_attention.hpp"

namespace ejk::kernels::mla_attention {
namespace {

constexpr const char* attend_source = "mla_attention/mla_decode.cu";
constexpr const char* passes_source = "mla_attention/mla_decode.cl";
constexpr std::int64_t absorb_threads = 256;

// mla_decode.cu's layout: 16 query rows, two tiles, P, and the softmax scratch.
std::int64_t attend_shared(const Problem& p, std::int64_t bn) {
  const std::int64_t row = p.width() + 8;
  return (16 * row + 2 * bn * row + 16 * (bn + 8)) * 2 + 2 * 4 * 16 * 4;
}

class CudaMlaDecode final : public Implementation {
 public:
  std::string_view kernel() const override { return "mla_decode"; }
  Backend backend() const override { return Backend::cuda; }
  int priority() const override { return 1; }
  std::vector<ArgDef> args() const override { return decode_args(); }
  std::vector<std::string> sources() const override { return {attend_source, passes_source}; }

  bool supports(const Invocation& inv, const DeviceInfo& dev) const override {
    const Problem p = Problem::of(inv);
    if (p.dtype != DType::f16 && p.dtype != DType::bf16) return false;
    if (!std::any_of(dev.coopmat.begin(), dev.coopmat.end(), [&](const CoopMatShape& c) { return c.a == p.dtype; }))
      return false;
    return p.rank % 64 == 0 && p.width() % 16 == 0 && p.block_size % 32 == 0 &&
           attend_shared(p, 32) <= cuda::shared_max(dev) && p.batch * p.heads * p.width() < (std::int64_t{1} << 31);
  }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    ParamSpace s;
    s.param("block_n", {32, 64})
        .param("splits", {1, 2, 4, 8, 16, 32})
        .constraint("block_size % block_n == 0")
        .constraint("splits == 1 || splits * block_n <= max_context")
        .constraint("(16 * (kv_lora_rank + rope_dim + 8) + 2 * block_n * (kv_lora_rank + rope_dim + 8) + 16 * (block_n + 8)) * 2 + 512 <= " +
                    std::to_string(cuda::shared_max(dev)))
        .bind(MlaDecodeKernel().vars(inv))
        .bind(device_vars(dev));
    return s;
  }

  // 32-row tiles (two fit next to the queries on every architecture), splits for every
  // multiprocessor twice over.
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    const Problem p = Problem::of(inv);
    const std::int64_t groups = p.batch * ((p.heads + 15) / 16);
    return Config{{"block_n", 32},
                  {"splits", pick_splits(p, groups, 32, std::max<std::int64_t>(1, dev.compute_units))}};
  }

  void prepare(const Invocation& inv, const Config& config, Device& device) const override {
    const Problem p = Problem::of(inv);
    auto& dev = cuda::cuda_target(device);
    (void)attend(p, checked_block_n(config, p), dev);
    (void)dev.kernel(passes_source, passes_options(p), "mla_absorb");
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    auto& dev = cuda::cuda_target(device);
    const std::int64_t bn = checked_block_n(config, p), splits = config.get("splits");
    if (splits <= 0) throw InvalidArgument("mla_decode on CUDA: config " + config.canonical() + " needs splits > 0");
    if (p.batch == 0) return;
    const std::string options = passes_options(p);
    auto absorb = dev.kernel(passes_source, options, "mla_absorb");
    auto combine = dev.kernel(passes_source, options, "mla_combine");
    auto att = attend(p, bn, dev);

    const std::int64_t bh = p.batch * p.heads;
    auto qs = dev.scratch(static_cast<std::size_t>(std::max<std::int64_t>(bh * p.width(), 1)) * 4);
    auto part_o = dev.scratch(static_cast<std::size_t>(std::max<std::int64_t>(bh * splits * p.rank, 1)) * 4);
    auto part_ml = dev.scratch(static_cast<std::size_t>(std::max<std::int64_t>(bh * splits * 2, 1)) * 4);
    const int dtype = p.dtype == DType::f16 ? 1 : 2;
    const auto t = static_cast<std::size_t>(absorb_threads);
    if (bh == 0) return;
    dev.launch(*absorb, clc::Range(static_cast<std::size_t>(bh) * t), clc::Range(t), args[arg::q_nope],
               args[arg::q_pe], args[arg::w_kc], *qs, static_cast<int>(p.heads), static_cast<int>(p.nope_dim),
               static_cast<float>(p.scale), dtype);
    CUdeviceptr qs_p = dev.pointer(*qs), kv = dev.pointer(args[arg::kv_cache].buffer());
    CUdeviceptr tables = dev.pointer(args[arg::block_tables].buffer()), lens = dev.pointer(args[arg::context_lens].buffer());
    CUdeviceptr po = dev.pointer(*part_o), pml = dev.pointer(*part_ml);
    int heads = static_cast<int>(p.heads), block_size = static_cast<int>(p.block_size);
    int max_blocks = static_cast<int>(p.max_blocks), n_splits = static_cast<int>(splits);
    void* params[] = {&qs_p, &kv, &tables, &lens, &po, &pml, &heads, &block_size, &max_blocks, &n_splits};
    dev.launch_cuda(*att, {static_cast<unsigned>(splits), static_cast<unsigned>((p.heads + 15) / 16), static_cast<unsigned>(p.batch)},
                    {128, 1, 1}, static_cast<std::size_t>(attend_shared(p, bn)), params);
    dev.launch(*combine, clc::Range(static_cast<std::size_t>(bh) * t), clc::Range(t), *part_o, *part_ml,
               args[arg::w_vc], args[arg::out], static_cast<int>(p.heads), static_cast<int>(splits),
               static_cast<int>(p.v_dim), dtype);
  }

 private:
  static std::int64_t checked_block_n(const Config& config, const Problem& p) {
    const std::int64_t bn = config.get("block_n");
    if ((bn != 32 && bn != 64) || p.block_size % bn != 0)
      throw InvalidArgument("mla_decode on CUDA: config " + config.canonical() + " needs block_n 32 or 64 dividing block_size " +
                            std::to_string(p.block_size));
    return bn;
  }
  // The OpenCL C program's options for its absorb and combine passes (its attention pass, unused,
  // at its smallest).
  static std::string passes_options(const Problem& p) {
    return " -DTHREADS=" + std::to_string(absorb_threads) + " -DHG=1 -DBLOCK_N=4 -DRANK=" + std::to_string(p.rank) +
           " -DROPE=" + std::to_string(p.rope_dim) + " -DSTAGE16=1";
  }
  static std::shared_ptr<cuda::CudaKernel> attend(const Problem& p, std::int64_t bn, cuda::CudaTarget& dev) {
    auto def = [](const char* name, std::int64_t v) { return std::string("-D") + name + "=" + std::to_string(v); };
    return dev.cuda_kernel(attend_source,
                           {def("RANK", p.rank), def("ROPE", p.rope_dim), def("BN", bn), def("BF16", p.dtype == DType::bf16)},
                           "ejk_mla_attend_mma");
  }
};

}  // namespace

EJK_BUILTIN(implementations, "mla_attention/cuda") { r.add(std::make_shared<CudaMlaDecode>()); }

}  // namespace ejk::kernels::mla_attention
