#pragma once
// The host side of the OpenCL C tensor-core GEMM tile (clc_gemm_mma.h) that matmul and
// grouped_matmul share: its parameters, their space and checks, the local memory and work-items a
// launch takes, and the build options.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <utility>
#include <string>
#include <string_view>

#include "ejk/error.hpp"
#include "ejk/kernel.hpp"

namespace ejk::kernels {

// The tile's OpenCL C, which an implementation that includes it lists among its sources().
inline constexpr const char* mma_tile_source = "common/clc_gemm_mma.h";

// BM x BN tiles of WM x WN warps, BK-deep slices in a ring of STAGES local buffers, rows padded
// or (swizzle) permuted, fragments double-buffered (pipe).
struct MmaTiles {
  std::int64_t bm, bn, bk, wm, wn, stages, swizzle, pipe;

  static MmaTiles of(const Config& c) {
    return {c.get("bm"), c.get("bn"), c.get("bk"), c.get("wm"), c.get("wn"), c.get("stages"), c.get("swizzle"),
            c.get("pipe")};
  }
  std::int64_t threads() const { return wm * wn * 32; }
  // The ring's bytes for operands stored transposed (trans_a: A as K x M; trans_b: B as N x K).
  std::int64_t local_bytes(bool trans_a, bool trans_b) const {
    const std::int64_t pad = swizzle ? 0 : 8;
    const std::int64_t a = trans_a ? bk * (bm + pad) : bm * (bk + pad);
    const std::int64_t b = trans_b ? bn * (bk + pad) : bk * (bn + pad);
    return stages * (a + b) * 2;
  }
  // A work-item loads one column of 16-byte chunks of each local tile, so a tile row's chunks
  // divide the work-items; swizzling permutes a row's chunks within aligned groups of up to 8,
  // so a swizzled row holds a power of two of them.
  bool loads_fit(bool trans_a, bool trans_b) const {
    auto pow2 = [](std::int64_t v) { return v > 0 && (v & (v - 1)) == 0; };
    const std::int64_t a_chunks = (trans_a ? bm : bk) / 8, b_chunks = (trans_b ? bk : bn) / 8;
    return a_chunks > 0 && b_chunks > 0 && threads() % a_chunks == 0 && threads() % b_chunks == 0 &&
           (swizzle == 0 || (pow2(a_chunks) && pow2(b_chunks)));
  }
  // Throws InvalidArgument naming `where` for a config clc_gemm_mma.h cannot run on `dev` (one
  // that did not come from mma_tile_space).
  void check(std::string_view where, const Config& c, bool trans_a, bool trans_b, const DeviceInfo& dev) const {
    const bool ok = bm > 0 && bn > 0 && (bk == 16 || bk == 32 || bk == 64) && wm > 0 && wn > 0 && bm % wm == 0 &&
                    bn % wn == 0 && (bm / wm) % 16 == 0 && (bn / wn) % 16 == 0 && stages >= 2 && stages <= 8 &&
                    (swizzle == 0 || swizzle == 1) && (pipe == 0 || pipe == 1) &&
                    threads() <= static_cast<std::int64_t>(dev.max_workgroup_size) && loads_fit(trans_a, trans_b);
    if (!ok) throw InvalidArgument(std::string(where) + ": inconsistent config " + c.canonical());
    if (local_bytes(trans_a, trans_b) > static_cast<std::int64_t>(dev.static_local()))
      throw InvalidArgument(std::string(where) + ": config " + c.canonical() + " needs " +
                            std::to_string(local_bytes(trans_a, trans_b)) + " bytes of local memory, " + dev.id() +
                            " has " + std::to_string(dev.static_local()));
  }
  std::string build_options(bool trans_a, bool trans_b, bool bf16) const {
    std::string o;
    auto def = [&](const char* name, std::int64_t v) { o += std::string(" -D") + name + "=" + std::to_string(v); };
    def("BM", bm);
    def("BN", bn);
    def("BK", bk);
    def("WM", wm);
    def("WN", wn);
    def("STAGES", stages);
    def("SWIZZLE", swizzle);
    def("PIPE", pipe);
    def("TRANS_A", trans_a);
    def("TRANS_B", trans_b);
    def("BF16", bf16);
    return o;
  }
};

// The tile parameters and what constrains them on `dev`; `rows` and `cols` name the variables of
// the output's extent a tile covers, and `trans_a`, `trans_b` must be bound too (by the caller).
inline ParamSpace mma_tile_space(std::string_view rows, std::string_view cols) {
  ParamSpace s;
  s.param("bm", {64, 128, 256})
      .param("bn", {64, 128, 256})
      .param("bk", {16, 32, 64})
      .param("wm", {1, 2, 4})
      .param("wn", {1, 2, 4})
      .param("stages", {2, 3, 4})
      .param("swizzle", {0, 1})
      .param("pipe", {0, 1})
      // 4 or 8 warps, each a tile of 16-row by 16-column multiples, at most 64 x 64 of
      // accumulators (128 registers a work-item).
      .constraint("wm * wn == 4 || wm * wn == 8")
      .constraint("(bm / wm) % 16 == 0 && (bn / wn) % 16 == 0")
      .constraint("(bm / wm) * (bn / wn) <= 4096")
      .constraint("wm * wn * 32 <= max_workgroup_size")
      // MmaTiles::local_bytes within what the device gives a program's fixed-size local arrays
      // (the ring is one).
      .constraint("stages * (bm * bk + bn * bk + (1 - swizzle) * 8 * (trans_a * bk + (1 - trans_a) * bm + trans_b * bn + "
                  "(1 - trans_b) * bk)) * 2 <= static_local_mem")
      // Tiles no larger than the product needs.
      .constraint("bm <= 64 || " + std::string(rows) + " > 64")
      .constraint("bn <= 64 || " + std::string(cols) + " > 64");
  return s;
}

// The first of these tiles (with the caller's other parameters, `extra`) that `s` admits and that
// gives every compute unit a workgroup (`tiles(bm, bn)` counts a config's workgroups), else the
// last admitted. On an H200 (bench/results/h200-2026-11-27b/gemm): 128 x 256 x 32 tiles of 2 x 4
// warps, 3 padded stages (80 KiB; NVIDIA's OpenCL gives fixed-size arrays that from sm_80),
// fragments double-buffered, 400 TFLOP/s at 4096^3 f16 where 128 x 128 in 4 stages ran 330 and
// in 48 KiB 2 stages 285-287. `tall` leads with 256 x 128 (4 x 2 warps) instead: grouped
// products, whose groups cut the rows, ran 1.24x faster with it at m 8192 k 2048 n 1408.
// Swizzled rows ran slower than padded ones in every pairing.
inline Config mma_tile_heuristic(const ParamSpace& s, const Config& extra, std::int64_t compute_units,
                                 const std::function<std::int64_t(std::int64_t, std::int64_t)>& tiles,
                                 bool tall = false) {
  auto make = [&](std::int64_t bm, std::int64_t bn, std::int64_t bk, std::int64_t wm, std::int64_t wn,
                 std::int64_t stages, std::int64_t swizzle, std::int64_t pipe) {
    Config c = extra;
    for (const auto& [name, v] : std::initializer_list<std::pair<const char*, std::int64_t>>{
             {"bm", bm}, {"bn", bn}, {"bk", bk}, {"wm", wm}, {"wn", wn}, {"stages", stages}, {"swizzle", swizzle},
             {"pipe", pipe}})
      c.set(name, v);
    return c;
  };
  const Config tries[] = {tall ? make(256, 128, 32, 4, 2, 3, 0, 1) : make(128, 256, 32, 2, 4, 3, 0, 1),
                          make(128, 128, 32, 2, 2, 4, 0, 0),
                          make(128, 128, 32, 2, 2, 2, 0, 0),
                          make(64, 128, 32, 2, 2, 4, 1, 0), make(64, 64, 32, 2, 2, 4, 1, 0)};
  const Config* last = nullptr;
  for (const Config& c : tries) {
    if (!s.admits(c)) continue;
    last = &c;
    if (tiles(c.get("bm"), c.get("bn")) >= compute_units) return c;
  }
  if (last) return *last;
  auto all = s.enumerate();
  if (all.empty()) throw SelectionError("no tensor-core tile fits");
  return all.front();
}

}  // namespace ejk::kernels
