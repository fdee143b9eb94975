// matmul on CUDA tensor cores: f16 and bf16 with f32 accumulation, by wgmma with TMA on Hopper
// (matmul_wgmma.cu) and by mma.sync from sm_80 (matmul.cu); f32 with the tf32 option by mma.sync
// on TF32 from sm_80 (matmul.cu built with TF32) and on Hopper by wgmma where both operands are
// K-major (matmul_wgmma.cu built with TF32). f32 without tf32, and operands whose rows are
// not 16-byte multiples (cp.async and TMA move 16-byte units), fall to the OpenCL C implementation
// on the same device.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/cuda/cuda_device.hpp"
#include "common/builtin.hpp"
#include "common/gemm_wgmma.hpp"
#include "ejk/error.hpp"
#include "matmul/matmul.hpp"

namespace ejk::kernels::matmul {
namespace {

constexpr const char* tc_source = "matmul/matmul.cu";
constexpr const char* wgmma_source = "matmul/matmul_wgmma.cu";

// Rows and batch strides of a and b in 16-byte multiples of `elems` elements, indices in int.
bool sixteen_byte_rows(const Problem& p, std::int64_t elems) {
  return p.rows_in_multiples_of(elems) && std::max({p.m, p.n, p.k, p.m * p.n}) < INT_MAX;
}

bool tensor_core_operands(const Problem& p, const DeviceInfo& dev) {
  if (p.dtype != DType::f16 && p.dtype != DType::bf16) return false;
  return dev.offers({16, 8, 16, p.dtype, DType::f32}) && sixteen_byte_rows(p, 8);
}

// TF32 mma.sync comes with the 16-bit one (sm_80); the device lists only the latter's shapes.
bool tf32_operands(const Problem& p, const DeviceInfo& dev) {
  return p.tf32 && p.dtype == DType::f32 && dev.offers({16, 8, 16, DType::f16, DType::f32}) && sixteen_byte_rows(p, 4);
}

struct Tiles {
  std::int64_t bm, bn, bk, wm, wn, stages, group_m;
  static Tiles of(const Config& c) {
    return {c.get("bm"), c.get("bn"), c.get("bk"), c.get("wm"), c.get("wn"), c.get("stages"), c.get("group_m", 8)};
  }
  std::int64_t threads() const { return wm * wn * 32; }
  // Rows padded as matmul.cu pads them: 16 bytes, or on TF32 32 bytes where k is not contiguous.
  std::int64_t shared_bytes(const Problem& p) const {
    const std::int64_t pad_a = p.tf32 && !p.trans_a ? 4 : 8, pad_b = p.tf32 && p.trans_b ? 4 : 8;
    const std::int64_t a = p.trans_a ? bk * (bm + pad_a) : bm * (bk + pad_a);
    const std::int64_t b = p.trans_b ? bn * (bk + pad_b) : bk * (bn + pad_b);
    return stages * (a + b) * (p.tf32 ? 4 : 2);
  }
  void check(const Config& c, const Problem& p, const DeviceInfo& dev) const {
    // k slices of 64 or 128 bytes.
    const bool bk_ok = p.tf32 ? bk == 16 || bk == 32 : bk == 32 || bk == 64;
    const bool ok = bm > 0 && bn > 0 && bk_ok && wm > 0 && wn > 0 && (bm / wm) % 16 == 0 &&
                    bm % wm == 0 && bn % wn == 0 && (bn / wn) % 16 == 0 && stages >= 2 && stages <= 8 &&
                    group_m >= 1 && threads() <= 1024 && shared_bytes(p) <= cuda::shared_max(dev);
    if (!ok) throw InvalidArgument("matmul on CUDA: inconsistent config " + c.canonical());
  }
};

std::int64_t tiles_of(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// mma.sync from sm_80: f16 and bf16, or (tf32_) f32 with the tf32 option; one source, one
// structure, spaces and heuristics of their own.
class CudaMatmul final : public Implementation {
 public:
  explicit CudaMatmul(bool tf32) : tf32_(tf32) {}
  std::string_view kernel() const override { return "matmul"; }
  Backend backend() const override { return Backend::cuda; }
  // Before the OpenCL C implementation wherever it applies.
  int priority() const override { return 1; }
  std::vector<ArgDef> args() const override { return matmul_args(); }
  std::vector<std::string> sources() const override { return {tc_source}; }

  bool supports(const Invocation& inv, const DeviceInfo& dev) const override {
    const Problem p = Problem::of(inv);
    return tf32_ ? tf32_operands(p, dev) : tensor_core_operands(p, dev);
  }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    // The stages' tiles (Tiles::shared_bytes) within the device's shared memory.
    const std::string shared =
        tf32_ ? "stages * (bm * bk + bn * bk + 8 * trans_a * bk + 4 * (1 - trans_a) * bm + 4 * trans_b * bn + 8 * (1 - trans_b) * bk) * 4 <= "
              : "stages * (bm * bk + bn * bk + 8 * (trans_a * bk + (1 - trans_a) * bm) + 8 * (trans_b * bn + (1 - trans_b) * bk)) * 2 <= ";
    // 64 or 128 bytes of k.
    const std::vector<Value> bk = tf32_ ? std::vector<Value>{std::int64_t{16}, std::int64_t{32}}
                                        : std::vector<Value>{std::int64_t{32}, std::int64_t{64}};
    ParamSpace s;
    s.param("bm", {64, 128, 256})
        .param("bn", {64, 128, 256})
        .param("bk", bk)
        .param("wm", {1, 2, 4})
        .param("wn", {1, 2, 4})
        .param("stages", {2, 3, 4, 5})
        .param("group_m", {1, 8})
        // 4 or 8 warps, each a tile of 16-row by 16-column multiples, at most 64 x 64 of
        // accumulators (128 registers a thread).
        .constraint("wm * wn == 4 || wm * wn == 8")
        .constraint("(bm / wm) % 16 == 0 && (bn / wn) % 16 == 0")
        .constraint("(bm / wm) * (bn / wn) <= 4096")
        .constraint(shared + std::to_string(cuda::shared_max(dev)))
        // Tiles no larger than the product needs.
        .constraint("bm <= 64 || m > 64")
        .constraint("bn <= 64 || n > 64")
        .bind(MatmulKernel().vars(inv))
        .bind(device_vars(dev));
    return s;
  }

  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    const Problem p = Problem::of(inv);
    const std::int64_t sms = std::max<std::int64_t>(dev.compute_units, 1);
    auto tiles = [&](std::int64_t bm, std::int64_t bn) { return p.batch * tiles_of(p.m, bm) * tiles_of(p.n, bn); };
    if (tf32_) return tf32_heuristic(p, dev, tiles(128, 128) >= sms);
    // 128 x 128 x 64 tiles of 4 warps (32 x 128 each), 3 stages: the best of a 40-candidate tune
    // at 4096^3 f16 and 4096 x 14336 x 4096 bf16 on an H100 (bench/results/h100-2026-11-26/cuda),
    // where the tiles still fill the device; else 64 x 64 tiles of 4 warps.
    Config c{{"group_m", 1}};
    if (p.m > 64 && p.n > 64 && tiles(128, 128) >= sms)
      c.set("bm", 128), c.set("bn", 128), c.set("bk", 64), c.set("stages", cuda::shared_max(dev) >= 105 * 1024 ? 3 : 2),
          c.set("wm", 4), c.set("wn", 1);
    else
      c.set("bm", 64), c.set("bn", 64), c.set("bk", 32), c.set("stages", 4), c.set("wm", 2), c.set("wn", 2);
    return c;
  }

  void prepare(const Invocation& inv, const Config& config, Device& device) const override {
    const Problem p = Problem::of(inv);
    auto& dev = cuda::cuda_target(device);
    const Tiles t = Tiles::of(config);
    t.check(config, p, dev.info());
    (void)program(p, t, dev);
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    auto& dev = cuda::cuda_target(device);
    const Tiles t = Tiles::of(config);
    t.check(config, p, dev.info());
    if (p.m == 0 || p.n == 0 || p.batch == 0) return;
    auto k = program(p, t, dev);
    int m = static_cast<int>(p.m), n = static_cast<int>(p.n), kk = static_cast<int>(p.k);
    float alpha = static_cast<float>(p.alpha), beta = static_cast<float>(p.beta);
    int lda = static_cast<int>(p.trans_a ? p.m : p.k), ldb = static_cast<int>(p.trans_b ? p.k : p.n), ldc = n;
    long long sa = p.batch_stride_a, sb = p.batch_stride_b, sc = p.batch_stride_c;
    CUdeviceptr a = dev.pointer(args[0].buffer()), b = dev.pointer(args[1].buffer()), c = dev.pointer(args[2].buffer());
    void* params[] = {&m, &n, &kk, &alpha, &beta, &a, &lda, &sa, &b, &ldb, &sb, &c, &ldc, &sc};
    const auto blocks = static_cast<unsigned>(tiles_of(p.m, t.bm) * tiles_of(p.n, t.bn));
    dev.launch_cuda(*k, {blocks, 1, static_cast<unsigned>(p.batch)}, {static_cast<unsigned>(t.threads()), 1, 1},
                    static_cast<std::size_t>(t.shared_bytes(p)), params);
  }

 private:
  static std::shared_ptr<cuda::CudaKernel> program(const Problem& p, const Tiles& t, cuda::CudaTarget& dev) {
    auto def = [](const char* name, std::int64_t v) { return std::string("-D") + name + "=" + std::to_string(v); };
    return dev.cuda_kernel(tc_source,
                           {def("BM", t.bm), def("BN", t.bn), def("BK", t.bk), def("WM", t.wm), def("WN", t.wn),
                            def("STAGES", t.stages), def("GROUP_M", t.group_m), def("TRANS_A", p.trans_a),
                            def("TRANS_B", p.trans_b), def("BF16", p.dtype == DType::bf16), def("TF32", p.tf32)},
                           "ejk_gemm_mma");
  }

  // 128 x 128 tiles, 32 floats of k, 2 x 2 warps of 64 x 64: an m16n8k8 does half the work of
  // an m16n8k16 for as many fragment reads, so square warp tiles, which read the fewest fragments
  // per mma (4 A and 8 B fragments for 32 mmas a k step, against 2 and 16 for 32 x 128). 3 stages
  // (~105 KiB: two blocks to an H100 SM) where they fit; else 64 x 64 tiles.
  static Config tf32_heuristic(const Problem& p, const DeviceInfo& dev, bool fills) {
    Config c{{"group_m", 1}, {"wm", 2}, {"wn", 2}, {"bk", 32}};
    if (p.m > 64 && p.n > 64 && fills) {
      c.set("bm", 128), c.set("bn", 128);
      const bool three = Tiles{128, 128, 32, 2, 2, 3, 1}.shared_bytes(p) <= cuda::shared_max(dev);
      c.set("stages", three ? 3 : 2);
    } else {
      c.set("bm", 64), c.set("bn", 64), c.set("stages", 4);
    }
    return c;
  }

  bool tf32_;
};

class WgmmaMatmul final : public Implementation {
 public:
  std::string_view kernel() const override { return "matmul"; }
  Backend backend() const override { return Backend::cuda; }
  // Before mma.sync wherever wgmma exists.
  int priority() const override { return 2; }
  std::vector<ArgDef> args() const override { return matmul_args(); }
  std::vector<std::string> sources() const override { return {wgmma_source, "common/gemm_wgmma.cuh"}; }

  // wgmma, setmaxnreg and TMA are sm_90a's alone (Blackwell has other instructions).
  // f32 with tf32 too where both operands are K-major (a as stored, b transposed): wgmma reads
  // TF32 in no other layout.
  bool supports(const Invocation& inv, const DeviceInfo& dev) const override {
    const Problem p = Problem::of(inv);
    return dev.architecture == "sm_90" &&
           (tensor_core_operands(p, dev) || (tf32_operands(p, dev) && !p.trans_a && p.trans_b));
  }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    ParamSpace s = wgmma_space("m", "n");
    s.bind(MatmulKernel().vars(inv)).bind(device_vars(dev));
    return s;
  }

  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    const Problem p = Problem::of(inv);
    return wgmma_heuristic(p.m, p.n, std::max<std::int64_t>(dev.compute_units, 1), [&](std::int64_t bm, std::int64_t bn) {
      return p.batch * tiles_of(p.m, bm) * tiles_of(p.n, bn);
    });
  }

  void prepare(const Invocation& inv, const Config& config, Device& device) const override {
    const Problem p = Problem::of(inv);
    auto& dev = cuda::cuda_target(device);
    const WgmmaTiles t = WgmmaTiles::of(config);
    t.check("matmul on CUDA (wgmma)", config);
    (void)program(p, t, dev);
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    auto& dev = cuda::cuda_target(device);
    const WgmmaTiles t = WgmmaTiles::of(config);
    t.check("matmul on CUDA (wgmma)", config);
    if (p.m == 0 || p.n == 0 || p.batch == 0) return;
    auto k = program(p, t, dev);
    // An operand's map: (contiguous, other, batch) dimensions; where the contiguous one is M or
    // N, 64 x 64 boxes, where it is K, a box of 64-wide K slices of `tile` rows.
    // An operand's map: (contiguous, other, batch) dimensions; where the contiguous one is M or
    // N, 64 x 64 boxes (16-bit only), where it is K, 128-byte K slices of `tile` rows.
    const std::uint32_t esize = p.tf32 ? 4 : 2;
    auto map = [&](const Buffer& buf, bool k_major, std::int64_t rows, std::int64_t batch_stride, std::int64_t tile) {
      const bool batched = batch_stride != 0 && p.batch > 1;
      const auto shape = wgmma_operand(k_major ? rows : p.k, k_major ? p.k : rows, batched ? p.batch : 1,
                                       batched ? batch_stride : 0, k_major ? tile : 64, esize);
      return std::pair{dev.tensor_map(buf, shape), batched ? 1 : 0};
    };
    // A is K-major unless transposed (rows m); B is K-major when transposed (rows n).
    auto [a_map, a_batched] = map(args[0].buffer(), !p.trans_a, p.m, p.batch_stride_a, t.bm);
    auto [b_map, b_batched] = map(args[1].buffer(), p.trans_b, p.n, p.batch_stride_b, t.bn);
    int m = static_cast<int>(p.m), n = static_cast<int>(p.n), kk = static_cast<int>(p.k), ldc = n;
    float alpha = static_cast<float>(p.alpha), beta = static_cast<float>(p.beta);
    long long sc = p.batch_stride_c;
    CUdeviceptr c = dev.pointer(args[2].buffer());
    void* params[] = {&a_map, &b_map, &m, &n, &kk, &alpha, &beta, &a_batched, &b_batched, &c, &ldc, &sc};
    const auto blocks = static_cast<unsigned>(tiles_of(p.m, t.bm) * tiles_of(p.n, t.bn));
    dev.launch_cuda(*k, {blocks, 1, static_cast<unsigned>(p.batch)}, {static_cast<unsigned>(t.threads()), 1, 1},
                    static_cast<std::size_t>(t.shared_bytes()), params);
  }

 private:
  static std::shared_ptr<cuda::CudaKernel> program(const Problem& p, const WgmmaTiles& t, cuda::CudaTarget& dev) {
    auto options = t.build_options();
    options.insert(options.end(), {"-DTRANS_A=" + std::to_string(p.trans_a), "-DTRANS_B=" + std::to_string(p.trans_b),
                                   "-DBF16=" + std::to_string(p.dtype == DType::bf16), "-DTF32=" + std::to_string(p.tf32)});
    return dev.cuda_kernel(wgmma_source, options, "ejk_gemm_wgmma");
  }
};

}  // namespace

EJK_BUILTIN(implementations, "matmul/cuda") {
  r.add(std::make_shared<CudaMatmul>(false));
  r.add(std::make_shared<CudaMatmul>(true));
  r.add(std::make_shared<WgmmaMatmul>());
}

}  // namespace ejk::kernels::matmul
