// The decode engine on OpenCL: decode_attention.cl's two passes, one program per (threads,
// block_k, rows, head_dim class); everything else is a kernel argument.
#include <algorithm>
#include <climits>
#include <memory>
#include <string>

#include "backends/clc/clc_device.hpp"
#include "common/builtin.hpp"
#include "decode_attention/engine.hpp"
#include "decode_attention/impls.hpp"
#include "decode_attention/reduce_pass.hpp"
#include "ejk/error.hpp"

namespace ejk::kernels::decode_attention {
namespace {

constexpr const char* source_key = "decode_attention/decode_attention.cl";

// Local memory of pass 1 in bytes (the kernel's __local arrays) for `rows` query rows:
// decode_partial's (query rows, key and value tiles, scores, row state, key addresses) or
// decode_stream's.
std::string shared_expr(const std::string& rows) {
  const std::string tile = "4 * (" + rows + " * head_dim_class + block_k * (2 * head_dim_class + 4) + " + rows +
                           " * (block_k + 1) + 5 * " + rows + ") + 8 * block_k";
  // Both bounds hold the pass's own size; the other pass's term is zeroed by `stream`.
  return "(1 - stream) * (" + tile + ") + stream * (" + stream_shared(rows) + ")";
}

class OpenCLDecode final : public clc::Implementation {
 public:
  OpenCLDecode(Backend backend, Binding b) : clc::Implementation(backend), b_(std::move(b)) {}
  std::string_view kernel() const override { return b_.kernel; }
  std::vector<ArgDef> args() const override { return b_.args; }
  std::vector<std::string> sources() const override { return {source_key, clc::prelude_source}; }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    const Engine e = b_.engine(inv);
    const std::string rows = e.varlen ? "(group * block_q)" : "group";
    ParamSpace s;
    // stream: pass 1 as decode_stream (1) or decode_partial (0); block_k sets the keys of a tile
    // either way.
    s.param("splits", {1, 2, 4, 8, 16, 32})
        .param("block_k", {8, 16, 32, 64})
        .param("threads", {64, 128, 256})
        .param("stream", {0, 1});
    if (e.varlen) s.param("block_q", {1, 2, 4, 8});
    s.constraint("splits == 1 || splits * block_k <= max_keys")
        .constraint("threads <= max_workgroup_size")
        // NVIDIA's driver launches at most 256 work-items of a kernel this size.
        .constraint("threads <= 256")
        .constraint(shared_expr(rows) + " <= local_mem")
        // decode_partial: accumulators per work-item stay in registers (and CPU drivers compile
        // in seconds), and every work-item takes part in staging a key tile's addresses.
        .constraint("stream == 1 || (block_k >= 16 && " + rows + " * head_dim_class <= 16 * threads && block_k <= threads)")
        .constraint("stream == 0 || (" + stream_constraint(rows) + ")")
        .bind(vars(e))
        .bind(device_vars(dev))
        .bind({{"head_dim_class", dim_class(e.head_dim)}});
    return s;
  }

  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    const Engine e = b_.engine(inv);
    const std::int64_t bq = query_block(e);
    const bool cpu = clc::is_cpu(dev);
    // GPUs: decode_stream with 64 work-items and four keys each, and splits for about two waves
    // of ~8 groups per compute unit: the loads of the next tile stay in flight through the whole
    // loop. On the H100 at batch 32, context 4096, f16 (pass 1 and reduce): 8 splits read the
    // cache at 2.38 TB/s, 4 at 2.13, 16 at 2.30; 128 work-items with four keys 2.34, with two
    // 2.05; decode_partial's best was 1.40.
    // CUDA (NVRTC's code of the same source) wants 128 work-items and only the splits that give
    // every multiprocessor a group: there, exhaustively at the same size, 128 work-items with
    // four keys and no split took 248 us (page_attention), 219 (ragged decode), 248 (ragged
    // paged), against 328, 302, 440 for OpenCL's choice (8 splits of 64); 2 splits 317 us.
    ParamSpace space = this->space(inv, dev);
    const std::int64_t units = std::max<std::int64_t>(1, dev.compute_units);
    if (!cpu) {
      const bool cuda = dev.backend == Backend::cuda;
      const auto c = cuda ? stream_heuristic(e, space, bq, {128, 64, 256}, (units + 1) / 2)
                          : stream_heuristic(e, space, bq, {64, 128, 256}, units * 4);
      if (c) return *c;
    }
    const std::int64_t threads = heuristic_threads(e, bq, cpu ? 64 : 128), bk = cpu ? 32 : 16;
    const std::int64_t parallel = units * (cpu ? 1 : 24);
    Config c{{"splits", heuristic_splits(e, bq, bk, parallel)}, {"block_k", bk}, {"threads", threads}, {"stream", 0}};
    if (e.varlen) c.set("block_q", bq);
    if (space.admits(c)) return c;
    for (std::int64_t k : {16, 32, 64})
      for (std::int64_t t : {128, 64, 256}) {
        Config d = c;
        d.set("block_k", k).set("threads", t);
        if (space.admits(d)) return d;
      }
    auto all = space.enumerate();
    if (all.empty()) throw SelectionError(b_.kernel + " opencl: no config fits " + dev.id() + " for " + inv.signature());
    return all.front();
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Engine e = b_.engine(inv);
    auto& dev = clc::clc_device(device);
    const std::int64_t splits = config.get("splits"), bk = config.get("block_k"), threads = config.get("threads");
    const std::int64_t bq = e.varlen ? config.get("block_q") : 1, stream = config.get("stream");
    const std::int64_t dm = dim_class(e.head_dim);
    if (splits <= 0 || bk <= 0 || threads <= 0 || bq <= 0 || (stream != 0 && stream != 1))
      throw InvalidArgument(b_.kernel + " opencl: config " + config.canonical() + " needs positive values and stream 0 or 1");
    if (!stream && threads < bk)
      throw InvalidArgument(b_.kernel + " opencl: config " + config.canonical() + " needs threads >= block_k");
    if (stream && !stream_fits(bk, dm, threads))
      throw InvalidArgument(b_.kernel + " opencl: config " + config.canonical() +
                            " needs whole 8-element slices per work-item and at least one key each (stream)");
    const double elems = static_cast<double>(std::max(e.tokens * e.heads, e.num_blocks * e.block_size * e.kv_heads)) *
                         static_cast<double>(e.head_dim) * static_cast<double>(splits);
    if (elems > static_cast<double>(INT_MAX) * 4.0 || e.tokens + e.num_seqs > INT_MAX / 2 ||
        static_cast<double>(e.num_seqs) * static_cast<double>(e.max_blocks) > INT_MAX)
      throw InvalidArgument(b_.kernel + " opencl: arrays too large for 32-bit work-item indices");
    const std::int64_t R = rows(e, bq);
    std::string options = " -DT=" + std::to_string(threads) + " -DBK=" + std::to_string(bk) + " -DR=" + std::to_string(R) +
                          " -DBQ=" + std::to_string(bq) + " -DDMAX=" + std::to_string(dm);
    if (stream)
      options += " -DKPT=" + std::to_string(stream_keys(bk, dm, threads)) + " -DDT=" + std::to_string(dtype_code(e.dtype)) +
                 " -DPG=" + std::to_string(e.layout == Layout::paged ? 1 : 0) + " -DVEC=" + std::to_string(e.head_dim % 8 == 0 ? 1 : 0);
    auto partial = dev.kernel(source_key, options, stream ? "decode_stream" : "decode_partial");
    auto reduce = dev.kernel(source_key, options, "decode_reduce");

    const std::int64_t parts = std::max<std::int64_t>(1, e.tokens * e.heads * splits);
    auto acc = dev.scratch(static_cast<std::size_t>(parts * e.head_dim) * 4);
    auto ml = dev.scratch(static_cast<std::size_t>(parts) * 8);
    auto arg = [&](int slot) -> const Tensor& { return arg_at(e, args, slot); };
    const int flags = decode_attention::flags(e);
    const LogitScales z = logit_scales(e);
    auto i32 = [](std::int64_t x) { return static_cast<int>(x); };
    const std::int64_t blocks = query_blocks(e, bq);
    if (blocks > 0 && e.num_seqs > 0)
      dev.launch(*partial,
                 clc::Range(static_cast<std::size_t>(splits * threads), static_cast<std::size_t>(e.kv_heads),
                               static_cast<std::size_t>(blocks)),
                 clc::Range(static_cast<std::size_t>(threads), 1, 1), arg(e.at.q), arg(e.at.k), arg(e.at.v),
                 arg(e.at.block_tables), arg(e.at.kv_begin), arg(e.at.kv_end), arg(e.at.q_loc), *acc, *ml,
                 dtype_code(e.dtype), flags, i32(e.num_seqs), i32(e.heads), i32(e.kv_heads), i32(e.head_dim),
                 i32(e.block_size), i32(e.max_blocks), i32(e.num_blocks), i32(e.seq_len), i32(splits), i32(e.window),
                 z.qscale, z.cap2);
    launch_reduce(dev, *reduce, e, *acc, *ml, args, splits);
  }

 private:
  Binding b_;
};

}  // namespace

void launch_reduce(clc::Device& dev, clc::Kernel& reduce, const Engine& e, const Buffer& acc, const Buffer& ml,
                   std::span<const Tensor> args, std::int64_t splits) {
  if (e.tokens <= 0) return;
  auto i32 = [](std::int64_t x) { return static_cast<int>(x); };
  const std::int64_t dlocal = std::min<std::int64_t>(dim_class(e.head_dim), 64);
  const DType sinks_dtype = e.sinks ? args[static_cast<std::size_t>(e.at.sinks)].dtype() : DType::f32;
  dev.launch(reduce,
             clc::Range(static_cast<std::size_t>((e.head_dim + dlocal - 1) / dlocal * dlocal),
                        static_cast<std::size_t>(e.tokens * e.heads)),
             clc::Range(static_cast<std::size_t>(dlocal), 1), acc, ml, arg_at(e, args, e.at.sinks), arg_at(e, args, e.at.out),
             arg_at(e, args, e.at.q_loc), dtype_code(e.dtype), dtype_code(sinks_dtype), flags(e), i32(e.num_seqs),
             i32(e.tokens), i32(e.heads), i32(e.head_dim), i32(splits));
}

// One implementation for every kernel the engine runs.
EJK_BUILTIN(implementations, "decode_attention/opencl") {
  for (const Binding& b : clients()) clc::add<OpenCLDecode>(r, b);
}

}  // namespace ejk::kernels::decode_attention
