// The decode engine on CUDA tensor cores (sm_80 and later), f16 and bf16: pass 1 is
// decode_attention.cu (per-warp cp.async streams of keys, mma.sync for all of a kv head's query
// rows at once); with one split it writes the output itself, with more decode_attention.cl's
// decode_reduce merges them. Other dtypes, head sizes and groups run the OpenCL C implementation.
#include <algorithm>
#include <climits>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_device.hpp"
#include "common/builtin.hpp"
#include "decode_attention/engine.hpp"
#include "decode_attention/impls.hpp"
#include "decode_attention/reduce_pass.hpp"
#include "ejk/error.hpp"

namespace ejk::kernels::decode_attention {
namespace {

constexpr const char* pass1_source = "decode_attention/decode_attention.cu";
constexpr const char* reduce_source = "decode_attention/decode_attention.cl";

// Shared memory of pass 1: the 16 query rows and every warp's ring of K and V tiles.
std::int64_t shared_bytes(std::int64_t head_dim, std::int64_t warps, std::int64_t block_k, std::int64_t stages) {
  return (16 + warps * stages * 2 * block_k) * head_dim * 2;
}

class CudaDecode final : public Implementation {
 public:
  explicit CudaDecode(Binding b) : b_(std::move(b)) {}
  std::string_view kernel() const override { return b_.kernel; }
  Backend backend() const override { return Backend::cuda; }
  int priority() const override { return 1; }
  std::vector<ArgDef> args() const override { return b_.args; }
  std::vector<std::string> sources() const override { return {pass1_source, reduce_source}; }

  bool supports(const Invocation& inv, const DeviceInfo& dev) const override {
    const Engine e = b_.engine(inv);
    if (e.dtype != DType::f16 && e.dtype != DType::bf16) return false;
    if (!dev.offers({16, 8, 16, e.dtype, DType::f32})) return false;
    return e.head_dim % 64 == 0 && e.head_dim <= 256 && e.group() <= 16 &&
           e.tokens + e.num_seqs < INT_MAX / 2 && static_cast<double>(e.num_seqs) * static_cast<double>(e.max_blocks) < INT_MAX &&
           static_cast<double>(e.capacity()) < INT_MAX / 2 &&
           shared_bytes(e.head_dim, 2, 16, 2) <= cuda::shared_max(dev);
  }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    const Engine e = b_.engine(inv);
    ParamSpace s;
    s.param("splits", {1, 2, 4, 8, 16, 32, 64})
        .param("warps", {2, 4, 8})
        .param("block_k", {16, 32})
        .param("stages", {2, 3, 4});
    if (e.varlen) s.param("block_q", {1, 2, 4, 8, 16});
    s.constraint("splits == 1 || splits * warps * block_k <= max_keys")
        .constraint(std::string(e.varlen ? "group * block_q" : "group") + " <= 16")
        // Blocks of query tokens no run fills only repeat smaller ones' work on empty rows.
        .constraint(e.varlen ? "block_q == 1 || block_q < 2 * max_q_len" : "1")
        // 256-wide rows: the accumulator alone is 128 registers a thread.
        .constraint("head_dim <= 192 || block_k == 16")
        .constraint("(16 + warps * stages * 2 * block_k) * head_dim * 2 <= " + std::to_string(cuda::shared_max(dev)))
        .bind(vars(e))
        .bind(device_vars(dev));
    return s;
  }

  // Four warps of 32 keys, two stages (the loads of a whole tile ahead per warp keep ~64 KiB in
  // flight per multiprocessor), and splits only while the blocks stay under one per
  // multiprocessor: on the H100, every config measured, at batch 32 (256 blocks), context 4096,
  // no split read the cache at 2.83 TB/s (95% of the device copy), 2 splits 2.74, 4 splits 2.64;
  // at batch 2, 16K of context (16 blocks unsplit), 8 splits took 62 us, 16 splits 72 us.
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    const Engine e = b_.engine(inv);
    const std::int64_t bq = e.varlen ? std::max<std::int64_t>(1, std::min(query_block(e), 16 / e.group())) : 1;
    const std::int64_t units = std::max<std::int64_t>(1, dev.compute_units);
    Config c{{"splits", heuristic_splits(e, bq, 4 * 32, (units + 3) / 4)}, {"warps", 4}, {"block_k", 32}, {"stages", 2}};
    if (e.varlen) c.set("block_q", bq);
    ParamSpace space = this->space(inv, dev);
    if (space.admits(c)) return c;
    for (std::int64_t bk : {32, 16})
      for (std::int64_t warps : {4, 2}) {
        Config d = c;
        d.set("warps", warps).set("block_k", bk).set("splits", 1);
        if (space.admits(d)) return d;
      }
    auto all = space.enumerate();
    if (all.empty()) throw SelectionError(b_.kernel + " cuda: no config fits " + dev.id() + " for " + inv.signature());
    return all.front();
  }

  void prepare(const Invocation& inv, const Config& config, Device& device) const override {
    const Engine e = b_.engine(inv);
    auto& dev = cuda::cuda_target(device);
    (void)pass1(e, config, dev);
    if (config.get("splits") > 1) (void)dev.kernel(reduce_source, reduce_options, "decode_reduce");
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Engine e = b_.engine(inv);
    auto& dev = cuda::cuda_target(device);
    const std::int64_t splits = config.get("splits"), warps = config.get("warps"), bk = config.get("block_k");
    const std::int64_t stages = config.get("stages"), bq = e.varlen ? config.get("block_q") : 1;
    if (splits <= 0 || bq <= 0)
      throw InvalidArgument(b_.kernel + " cuda: config " + config.canonical() + " needs positive splits and block_q");
    auto k1 = pass1(e, config, dev);
    const std::int64_t blocks = query_blocks(e, bq);
    if (blocks <= 0 || e.num_seqs <= 0 || e.tokens <= 0) return;

    std::shared_ptr<Buffer> acc, ml;
    if (splits > 1) {
      const std::int64_t parts = e.tokens * e.heads * splits;
      acc = dev.scratch(static_cast<std::size_t>(parts * e.head_dim) * 4);
      ml = dev.scratch(static_cast<std::size_t>(parts) * 8);
    }
    auto ptr = [&](int slot) { return dev.pointer(arg_at(e, args, slot).buffer()); };
    CUdeviceptr q = ptr(e.at.q), k = ptr(e.at.k), v = ptr(e.at.v), tables = ptr(e.at.block_tables);
    CUdeviceptr kv_begin = ptr(e.at.kv_begin), kv_end = ptr(e.at.kv_end), q_loc = ptr(e.at.q_loc);
    CUdeviceptr out = ptr(e.at.out), sinks = ptr(e.at.sinks);
    CUdeviceptr part_acc = acc ? dev.pointer(*acc) : out, part_ml = ml ? dev.pointer(*ml) : out;
    int sinks_dtype = dtype_code(e.sinks ? args[static_cast<std::size_t>(e.at.sinks)].dtype() : DType::f32);
    int flags = decode_attention::flags(e);
    auto i32 = [](std::int64_t x) { return static_cast<int>(x); };
    int num_seqs = i32(e.num_seqs), heads = i32(e.heads), kv_heads = i32(e.kv_heads), block_size = i32(e.block_size);
    int max_blocks = i32(e.max_blocks), num_blocks = i32(e.num_blocks), seq_len = i32(e.seq_len), n_splits = i32(splits);
    int window = i32(e.window);
    LogitScales z = logit_scales(e);
    void* params[] = {&q,          &k,        &v,          &tables,   &kv_begin, &kv_end,     &q_loc,
                      &part_acc,   &part_ml,  &out,        &sinks,    &sinks_dtype, &flags,   &num_seqs,
                      &heads,      &kv_heads, &block_size, &max_blocks, &num_blocks, &seq_len, &n_splits,
                      &window,     &z.qscale, &z.cap2};
    dev.launch_cuda(*k1, {static_cast<unsigned>(splits), static_cast<unsigned>(e.kv_heads), static_cast<unsigned>(blocks)},
                    {static_cast<unsigned>(warps * 32), 1, 1},
                    static_cast<std::size_t>(shared_bytes(e.head_dim, warps, bk, stages)), params);
    if (splits == 1) return;
    launch_reduce(dev, *dev.kernel(reduce_source, reduce_options, "decode_reduce"), e, *acc, *ml, args, splits);
  }

 private:
  // decode_attention.cl built at its smallest: only its decode_reduce runs here.
  static constexpr const char* reduce_options = " -DT=64 -DBK=16 -DR=1 -DBQ=1 -DDMAX=32";

  std::shared_ptr<cuda::CudaKernel> pass1(const Engine& e, const Config& config, cuda::CudaTarget& dev) const {
    const std::int64_t warps = config.get("warps"), bk = config.get("block_k"), stages = config.get("stages");
    const std::int64_t bq = e.varlen ? config.get("block_q") : 1;
    if ((warps != 2 && warps != 4 && warps != 8) || (bk != 16 && bk != 32) || stages < 2 || stages > 4 || bq < 1 ||
        e.group() * bq > 16)
      throw InvalidArgument(b_.kernel + " cuda: config " + config.canonical() +
                            " needs warps 2, 4 or 8, block_k 16 or 32, stages 2 to 4 and at most 16 query rows (group " +
                            std::to_string(e.group()) + " x block_q)");
    auto def = [](const char* name, std::int64_t v) { return std::string("-D") + name + "=" + std::to_string(v); };
    return dev.cuda_kernel(pass1_source,
                           {def("D", e.head_dim), def("G", e.group()), def("BQ", bq), def("WARPS", warps), def("BK", bk),
                            def("STAGES", stages), def("PAGED", e.layout == Layout::paged), def("BF16", e.dtype == DType::bf16)},
                           "ejk_decode_mma");
  }

  Binding b_;
};

}  // namespace

EJK_BUILTIN(implementations, "decode_attention/cuda") {
  for (const Binding& b : clients()) r.add(std::make_shared<CudaDecode>(b));
}

}  // namespace ejk::kernels::decode_attention
