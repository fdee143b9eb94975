// mla_decode on CUDA tensor cores (sm_80 and later), f16 and bf16 (mla_decode.cu): the absorb
// pass, a tensor-core attention pass that reads each tile of the latent cache once for 16 heads,
// the merge of its parts and the value projection. Other dtypes and shapes (latent rank a
// multiple of 64, row width a multiple of 32, pages of 32 rows) run the OpenCL C implementation.
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

constexpr const char* source = "mla_attention/mla_decode.cu";
constexpr double log2e = 1.4426950408889634;

// mla_decode.cu's layout: 16 query rows, a ring of tiles, P, the softmax scratch, the four warps'
// partial scores and a barrier a stage.
std::int64_t attend_shared(const Problem& p, std::int64_t bn, std::int64_t stages) {
  const std::int64_t row = p.width() + 8;
  return (16 * row + stages * bn * row + 16 * (bn + 8)) * 2 + 2 * 4 * 16 * 4 + 4 * 16 * (bn + 8) * 4 + 8 * stages;
}

// The shared memory of mla_decode.cu's head_gemm (the absorb pass): 32 rows of the left operand
// and `columns` of the weights over `k`, rows padded by 8 elements (k = nope_dim, 64 columns).
std::int64_t gemm_shared(std::int64_t k, std::int64_t columns) { return 2 * (32 * (k + 8) + k * (columns + 8)); }
std::int64_t absorb_shared(const Problem& p) { return gemm_shared(p.nope_dim, 64); }
// mla_decode.cu's ejk_mla_merge_project with `pnb` columns a block: the 16 rows of the projection's
// left operand, the rank x pnb slice of W_vc, and the part weights or the warps' partial products.
std::int64_t merge_project_shared(const Problem& p, std::int64_t pnb) {
  return 2 * (16 * (p.rank + 8) + p.rank * (pnb + 8)) + 4 * std::max<std::int64_t>(8 * 64, 64 * (pnb + 8));
}
// 64 columns a block where they fit the device's shared memory (and divide v_dim), else 32.
std::int64_t project_columns(const Problem& p, const DeviceInfo& dev) {
  return p.v_dim % 64 == 0 && merge_project_shared(p, 64) <= cuda::shared_max(dev) ? 64 : 32;
}
// The merge's part weights (mla_decode.cu's ejk_mla_merge_project: 64 a row).
constexpr std::int64_t max_splits = 64;
// Sequences a block of ejk_mla_merge_project: 4 put two blocks on a multiprocessor at batch 32
// (on the H100 its pass took 12.9 us with 8).
constexpr std::int64_t merge_rows = 4;

class CudaMlaDecode final : public Implementation {
 public:
  std::string_view kernel() const override { return "mla_decode"; }
  Backend backend() const override { return Backend::cuda; }
  int priority() const override { return 1; }
  std::vector<ArgDef> args() const override { return decode_args(); }
  std::vector<std::string> sources() const override { return {source}; }

  bool supports(const Invocation& inv, const DeviceInfo& dev) const override {
    const Problem p = Problem::of(inv);
    if (p.dtype != DType::f16 && p.dtype != DType::bf16) return false;
    if (!dev.offers({16, 8, 16, p.dtype, DType::f32})) return false;
    return p.rank % 64 == 0 && p.width() % 32 == 0 && p.block_size % 32 == 0 && p.nope_dim % 16 == 0 &&
           p.v_dim % 32 == 0 && attend_shared(p, 32, 2) <= cuda::shared_max(dev) && p.batch * p.heads * p.width() < (std::int64_t{1} << 31) &&
           std::max(absorb_shared(p), merge_project_shared(p, 32)) <= cuda::shared_max(dev);
  }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    ParamSpace s;
    s.param("block_n", {32, 64})
        .param("stages", {2, 3})
        .param("splits", {1, 2, 4, 8, 16, 32})
        .constraint("block_size % block_n == 0")
        .constraint("splits == 1 || splits * block_n <= max_context")
        .constraint("(16 * (kv_lora_rank + rope_dim + 8) + stages * block_n * (kv_lora_rank + rope_dim + 8) + 16 * (block_n + 8)) * 2 + 512 + 256 * (block_n + 8) + 8 * stages <= " +
                    std::to_string(cuda::shared_max(dev)))
        .bind(MlaDecodeKernel().vars(inv))
        .bind(device_vars(dev));
    return s;
  }

  // 32-row tiles, two stages (two blocks fit a multiprocessor of every architecture), splits for
  // every multiprocessor once over: on the H100 at batch 32, 8 splits took 124 us, 16 (twice
  // over) 142 us, the parts' merge growing with them.
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    const Problem p = Problem::of(inv);
    const std::int64_t groups = p.batch * ((p.heads + 15) / 16);
    return Config{{"block_n", 32},
                  {"stages", 2},
                  {"splits", pick_splits(p, groups, 32, std::max<std::int64_t>(1, (dev.compute_units + 1) / 2))}};
  }

  void prepare(const Invocation& inv, const Config& config, Device& device) const override {
    const Problem p = Problem::of(inv);
    auto& dev = cuda::cuda_target(device);
    (void)kernel(p, config, dev, "ejk_mla_attend_mma");
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    auto& dev = cuda::cuda_target(device);
    const std::int64_t bn = checked_block_n(config, p), splits = config.get("splits");
    if (splits <= 0 || splits > max_splits)
      throw InvalidArgument("mla_decode on CUDA: config " + config.canonical() + " needs splits from 1 to " +
                            std::to_string(max_splits));
    if (p.batch == 0) return;
    auto absorb = kernel(p, config, dev, "ejk_mla_absorb");
    auto att = kernel(p, config, dev, "ejk_mla_attend_mma");
    auto merge_project = kernel(p, config, dev, "ejk_mla_merge_project");

    const std::int64_t bh = p.batch * p.heads;
    if (bh == 0) return;
    auto qs = dev.scratch(static_cast<std::size_t>(bh * p.width()) * 4);
    auto part_o = dev.scratch(static_cast<std::size_t>(bh * splits * p.rank) * 4);
    auto part_ml = dev.scratch(static_cast<std::size_t>(bh * splits * 2) * 4);
    auto ptr = [&](int a) { return dev.pointer(args[static_cast<std::size_t>(a)].buffer()); };
    CUdeviceptr q_nope = ptr(arg::q_nope), q_pe = ptr(arg::q_pe), w_kc = ptr(arg::w_kc), w_vc = ptr(arg::w_vc);
    CUdeviceptr kv = ptr(arg::kv_cache), tables = ptr(arg::block_tables), lens = ptr(arg::context_lens), out = ptr(arg::out);
    CUdeviceptr qs_p = dev.pointer(*qs), po = dev.pointer(*part_o), pml = dev.pointer(*part_ml);
    int batch = static_cast<int>(p.batch), heads = static_cast<int>(p.heads), block_size = static_cast<int>(p.block_size);
    int max_blocks = static_cast<int>(p.max_blocks), n_splits = static_cast<int>(splits);
    float scale = static_cast<float>(p.scale * log2e);
    const auto u = [](std::int64_t x) { return static_cast<unsigned>(x); };

    void* absorb_params[] = {&q_nope, &q_pe, &w_kc, &qs_p, &batch, &heads, &scale};
    dev.launch_cuda(*absorb, {u(p.rank / 64 + (p.rope_dim + 63) / 64), u(p.heads), u((p.batch + 31) / 32)}, {128, 1, 1},
                    static_cast<std::size_t>(absorb_shared(p)), absorb_params);
    void* params[] = {&qs_p, &kv, &tables, &lens, &po, &pml, &heads, &block_size, &max_blocks, &n_splits};
    dev.launch_cuda(*att, {u(splits), u((p.heads + 15) / 16), u(p.batch)}, {128, 1, 1},
                    static_cast<std::size_t>(attend_shared(p, bn, config.get("stages"))), params, cuda::Launch::early);
    void* project_params[] = {&po, &pml, &w_vc, &out, &batch, &heads, &n_splits};
    const std::int64_t pnb = project_columns(p, dev.info());
    dev.launch_cuda(*merge_project, {u(p.v_dim / pnb), u(p.heads), u((p.batch + merge_rows - 1) / merge_rows)}, {256, 1, 1},
                    static_cast<std::size_t>(merge_project_shared(p, pnb)), project_params, cuda::Launch::early);
  }

 private:
  static std::int64_t checked_block_n(const Config& config, const Problem& p) {
    const std::int64_t bn = config.get("block_n");
    if ((bn != 32 && bn != 64) || p.block_size % bn != 0)
      throw InvalidArgument("mla_decode on CUDA: config " + config.canonical() + " needs block_n 32 or 64 dividing block_size " +
                            std::to_string(p.block_size));
    return bn;
  }
  static std::shared_ptr<cuda::CudaKernel> kernel(const Problem& p, const Config& config, cuda::CudaTarget& dev,
                                                   const char* name) {
    const std::int64_t bn = checked_block_n(config, p), stages = config.get("stages");
    if (stages != 2 && stages != 3)
      throw InvalidArgument("mla_decode on CUDA: config " + config.canonical() + " needs stages 2 or 3");
    auto def = [](const char* n, std::int64_t v) { return std::string("-D") + n + "=" + std::to_string(v); };
    return dev.cuda_kernel(source,
                           {def("RANK", p.rank), def("ROPE", p.rope_dim), def("NOPE", p.nope_dim), def("VDIM", p.v_dim),
                            def("PNB", project_columns(p, dev.info())), def("MR", merge_rows), def("BN", bn), def("STAGES", stages), def("BF16", p.dtype == DType::bf16)},
                           name);
  }
};

}  // namespace

EJK_BUILTIN(implementations, "mla_attention/cuda") { r.add(std::make_shared<CudaMlaDecode>()); }

}  // namespace ejk::kernels::mla_attention
