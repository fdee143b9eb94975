#pragma once
// The host side of the Hopper GEMM (gemm_wgmma.cuh) that matmul and grouped_matmul share: its
// tile parameters, their space and checks, and the shared memory and threads a launch takes.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "backends/cuda/cuda_device.hpp"
#include "ejk/error.hpp"
#include "ejk/kernel.hpp"

namespace ejk::kernels {

// BM x BN tiles, CW consumer warpgroups and a producer one, STAGES 64-wide K slices, blocks in
// groups of GROUP_M rows of tiles.
struct WgmmaTiles {
  std::int64_t bm, bn, cw, stages, group_m;

  static WgmmaTiles of(const Config& c) {
    return {c.get("bm"), c.get("bn"), c.get("cw"), c.get("stages"), c.get("group_m", 8)};
  }
  std::int64_t threads() const { return (cw + 1) * 128; }
  // Stages, 1 KiB to align them to the swizzle's period, and two barriers a stage.
  std::int64_t shared_bytes() const { return stages * (bm + bn) * 64 * 2 + 1024 + 16 * stages; }
  // Throws InvalidArgument naming `where` and the config for one the kernel cannot run (a config
  // that did not come from wgmma_space).
  void check(std::string_view where, const Config& c) const {
    const bool ok = (bm == 64 || bm == 128 || bm == 256) && (bn == 64 || bn == 128 || bn == 256) &&
                    (cw == 1 || cw == 2) && bm % (64 * cw) == 0 && bm / (64 * cw) * bn <= 256 && stages >= 2 &&
                    stages <= 8 && group_m >= 1 && shared_bytes() <= 227 * 1024;
    if (!ok) throw InvalidArgument(std::string(where) + ": inconsistent config " + c.canonical());
  }
  std::vector<std::string> build_options() const {
    auto def = [](const char* name, std::int64_t v) { return std::string("-D") + name + "=" + std::to_string(v); };
    return {def("BM", bm), def("BN", bn), def("CW", cw), def("STAGES", stages), def("GROUP_M", group_m)};
  }
};

// The TMA descriptor shape of a GEMM operand: `batch` row-major matrices of rows x cols elements
// of `element_bytes`, batch_stride elements apart (0: one after another), copied in boxes of
// 128-byte rows (64 16-bit or 32 f32 elements) by box_rows. An empty dimension is one element
// the kernels never read (rows of at least 16 bytes).
inline cuda::TensorMapShape wgmma_operand(std::int64_t rows, std::int64_t cols, std::int64_t batch,
                                          std::int64_t batch_stride, std::int64_t box_rows,
                                          std::uint32_t element_bytes) {
  const auto inner = static_cast<std::uint64_t>(std::max<std::int64_t>(cols, 1)),
             outer = static_cast<std::uint64_t>(std::max<std::int64_t>(rows, 1));
  const std::uint64_t row = std::max<std::uint64_t>(inner * element_bytes, 16);
  cuda::TensorMapShape s;
  s.dims = {inner, outer, static_cast<std::uint64_t>(batch)};
  s.strides = {row, batch_stride ? static_cast<std::uint64_t>(batch_stride) * element_bytes : row * outer};
  s.box = {128 / element_bytes, static_cast<std::uint32_t>(box_rows), 1};
  s.element_bytes = element_bytes;
  return s;
}

// The tile parameters and what constrains them; `rows` and `cols` name the variables (bound by
// the caller) of the output's extent a tile covers, so that no tile is larger than they need.
inline ParamSpace wgmma_space(std::string_view rows, std::string_view cols) {
  ParamSpace s;
  s.param("bm", {64, 128, 256})
      .param("bn", {64, 128, 256})
      .param("cw", {1, 2})
      .param("stages", {2, 3, 4, 5, 6})
      .param("group_m", {1, 8, 16})
      // Whole m64 strips per consumer, at most 128 accumulators a thread.
      .constraint("bm % (64 * cw) == 0 && bm / (64 * cw) * bn <= 256")
      .constraint("stages * (bm + bn) * 128 + 1024 + 16 * stages <= " + std::to_string(227 * 1024))
      .constraint("bm <= 64 || " + std::string(rows) + " > 64")
      .constraint("bn <= 64 || " + std::string(cols) + " > 64");
  return s;
}

// 128 x 256 tiles over two consumer warpgroups (a 64 x 256 strip each) where `tiles(bm, bn)`
// fills the device's `sms`, else 128 x 128, else 64-row tiles of one consumer.
template <class Tiles>
Config wgmma_heuristic(std::int64_t rows, std::int64_t cols, std::int64_t sms, Tiles tiles) {
  Config c{{"group_m", 8}, {"cw", 2}, {"bm", 128}};
  if (rows > 64 && cols > 128 && tiles(128, 256) >= sms)
    c.set("bn", 256), c.set("stages", 4);
  else if (rows > 64 && cols > 64 && tiles(128, 128) >= sms)
    c.set("bn", 128), c.set("stages", 5);
  else
    c.set("bm", 64), c.set("cw", 1), c.set("bn", cols > 64 ? 128 : 64), c.set("stages", 4);
  return c;
}

}  // namespace ejk::kernels
