// The linear-attention kernels on OpenCL: the passes of plan.hpp, each one launch of
// linear_attention.cl's la_token (recurrent) or la_chunk (gla, lightning_attention) with one
// group per (slice of block_v value columns, head, sequence), then (backward) la_gates with one
// group per (head, sequence). Widths, tile sizes and which per-channel gates exist are -D
// options (they size local memory and registers); the dtype, counts, flags and scales are
// arguments, so one program serves f16 and bf16 and every batch.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/clc/clc_device.hpp"
#include "common/builtin.hpp"
#include "common/dtype_code.hpp"
#include "ejk/error.hpp"
#include "linear_attention/linear_attention.hpp"
#include "linear_attention/plan.hpp"
#include "linear_attention/spaces.hpp"

namespace ejk::kernels::linear_attention {
namespace {

constexpr const char* source_key = "linear_attention/linear_attention.cl";


class OpenCLLinearAttention final : public clc::Implementation {
 public:
  OpenCLLinearAttention(Backend backend, Variant v, bool backward)
      : clc::Implementation(backend), variant_(v), backward_(backward) {}
  std::string_view kernel() const override { return kernel_name(variant_, backward_); }
  std::vector<ArgDef> args() const override { return kernel_args(variant_, backward_); }
  std::vector<std::string> sources() const override { return {source_key, clc::prelude_source}; }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    return device_space(variant_, backward_, inv, dev);
  }
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    return device_heuristic(variant_, backward_, inv, dev, !clc::is_cpu(dev));
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    auto& dev = clc::clc_device(device);
    const Tiles tiles = tiles_of(variant_, config);
    if (p.batch == 0 || p.num_seqs == 0) return;
    std::vector<const Tensor*> full(p.backward ? bwd::count : fwd::count, nullptr);
    for (std::size_t i = 0; i < args.size(); ++i) full[p.full_index(i)] = &args[i];
    const Buffer& any = args[0].buffer();
    auto buf = [&](std::size_t i) -> const Buffer* {
      const Tensor* t = full[i];
      return t && !is_absent(t->spec()) ? &t->buffer() : nullptr;
    };
    const Buffer* slot[static_cast<int>(Slot::ds032) + 1] = {};
    auto at = [&](Slot s) -> const Buffer*& { return slot[static_cast<int>(s)]; };
    at(Slot::q) = buf(fwd::q);
    at(Slot::k) = buf(fwd::k);
    at(Slot::v) = buf(fwd::v);
    at(Slot::gk) = buf(fwd::gk);
    at(Slot::gv) = buf(fwd::gv);
    at(Slot::h0) = buf(fwd::initial_state);
    std::shared_ptr<Buffer> gamma_buf;
    const Buffer* gamma = buf(fwd::g_gamma);
    if (p.variant == Variant::lightning) {
      const auto bytes = encode(p.dtype, p.gamma({}));
      gamma_buf = dev.scratch(bytes.size());
      dev.write(*gamma_buf, 0, bytes.data(), bytes.size());
      gamma = gamma_buf.get();
    }
    std::vector<std::shared_ptr<Buffer>> scratch;
    auto f32 = [&](Slot s, std::int64_t n) {
      scratch.push_back(dev.scratch(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) * 4));
      at(s) = scratch.back().get();
    };
    const std::int64_t TH = p.tokens() * p.heads, states = p.num_seqs * p.heads * p.K * p.V;
    if (!p.backward) {
      at(Slot::o) = buf(fwd::o);
      at(Slot::final_state) = buf(fwd::final_state);
    } else {
      at(Slot::dout) = buf(bwd::dout);
      at(Slot::ht) = buf(bwd::dht);
      f32(Slot::dq32, TH * p.K);
      f32(Slot::dk32, TH * p.K);
      f32(Slot::dv32, TH * p.V);
      if (p.has_gv) f32(Slot::o32, TH * p.V);
      if (p.has_ht) f32(Slot::st32, states);
      if (p.has_h0) f32(Slot::ds032, states);
    }
    auto or_any = [&](const Buffer* b) -> const Buffer& { return b ? *b : any; };
    const Buffer& cu = or_any(buf(fwd::cu_seqlens));
    const int dtype = dtype_code(p.dtype), heads = static_cast<int>(p.heads), seq = static_cast<int>(p.seq);
    const int varlen = p.varlen;

    for (const Pass& ps : plan(p)) {
      const std::int64_t threads = tiles.threads(ps.R);
      std::string options;
      auto def = [&](const char* name, std::int64_t v) { options += " -D" + std::string(name) + "=" + std::to_string(v); };
      def("R", ps.R);
      def("C", ps.C);
      def("BV", tiles.block_v);
      def("THREADS", threads);
      if (tiles.chunk) {
        def("CH", tiles.chunk);
        def("HAS_RG", ps.row_gate != Slot::none);
        def("HAS_CG", ps.col_gate != Slot::none);
      } else {
        def("KS", tiles.k_split);
        def("HAS_RG", ps.row_gate != Slot::none);
        def("HAS_CG", ps.col_gate != Slot::none);
      }
      auto k = dev.kernel(source_key, options, tiles.chunk ? "la_chunk" : "la_token");
      const std::size_t slices = static_cast<std::size_t>((ps.C + tiles.block_v - 1) / tiles.block_v);
      const auto t = static_cast<std::size_t>(threads);
      const int out_dtype = is_scratch(ps.out) ? 0 : dtype, fin_dtype = is_scratch(ps.final) ? 0 : dtype;
      dev.launch(*k, clc::Range(slices * t, static_cast<std::size_t>(p.heads), static_cast<std::size_t>(p.num_seqs)),
                 clc::Range(t, 1, 1), or_any(at(ps.query)), or_any(at(ps.key)), or_any(at(ps.value)),
                 or_any(buf(fwd::g)), or_any(gamma), or_any(at(ps.row_gate)), or_any(at(ps.col_gate)),
                 or_any(at(ps.init)), cu, or_any(at(ps.out)), or_any(at(ps.final)), heads, seq, varlen, dtype, out_dtype,
                 fin_dtype, static_cast<int>(p.has_g), static_cast<int>(p.has_gamma),
                 static_cast<int>(ps.init != Slot::none), static_cast<int>(ps.final != Slot::none),
                 static_cast<int>(ps.transposed), static_cast<float>(ps.out_scale), static_cast<float>(ps.kv_scale),
                 ps.shift, static_cast<int>(ps.reverse));
    }
    if (!p.backward) return;
    std::string options = " -DGATES=1 -DR=" + std::to_string(p.K) + " -DC=" + std::to_string(p.V) +
                          " -DTHREADS=" + std::to_string(gate_threads);
    auto k = dev.kernel(source_key, options, "la_gates");
    dev.launch(*k, clc::Range(static_cast<std::size_t>(p.heads * gate_threads), static_cast<std::size_t>(p.num_seqs)),
               clc::Range(gate_threads, 1), or_any(at(Slot::q)), or_any(at(Slot::k)), or_any(at(Slot::v)),
               or_any(at(Slot::dout)), or_any(buf(fwd::g)), or_any(gamma), or_any(at(Slot::gk)), or_any(at(Slot::gv)),
               or_any(at(Slot::ht)), cu, or_any(at(Slot::dq32)), or_any(at(Slot::dk32)), or_any(at(Slot::dv32)),
               or_any(at(Slot::o32)), or_any(at(Slot::st32)), or_any(at(Slot::ds032)), or_any(buf(bwd::dq)),
               or_any(buf(bwd::dk)), or_any(buf(bwd::dv)), or_any(buf(bwd::dg)), or_any(buf(bwd::dgk)),
               or_any(buf(bwd::dgv)), or_any(buf(bwd::dh0)), heads, seq, varlen, dtype, static_cast<int>(p.has_g),
               static_cast<int>(p.has_gamma), static_cast<int>(p.has_gk), static_cast<int>(p.has_gv),
               static_cast<int>(p.has_ht), static_cast<int>(p.has_h0), static_cast<int>(p.reverse));
  }

 private:
  Variant variant_;
  bool backward_;
};

}  // namespace

EJK_BUILTIN(implementations, "linear_attention/opencl") {
  for (Variant v : variants)
    for (bool backward : {false, true}) clc::add<OpenCLLinearAttention>(r, v, backward);
}

}  // namespace ejk::kernels::linear_attention
