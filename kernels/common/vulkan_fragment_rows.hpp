#pragma once
// Which rows of a subgroup's 16x16 f32 cooperative matrix each invocation holds.
// GL_NV_cooperative_matrix leaves the element layout to the implementation; a shader that reduces
// a fragment's rows in registers (the online softmax of flash attention and of the decode engine's
// tensor-core pass) needs to know which elements
// of an invocation share a row and which invocations share it. A probe (common/rows_coopmat.comp)
// learns it once per device.
#include <cstdint>
#include <span>

namespace ejk {
struct DeviceInfo;
}
namespace ejk::vulkan {
class VulkanDevice;
}

namespace ejk::kernels {

struct FragmentRows {
  // Each row lies on `lanes` invocations l0 .. l0 + lanes - 1 (l0 a multiple of lanes), at the
  // same elements of each, every one of them holding the same rows at the same elements; 0 where
  // the layout is not of that form (the shaders then reduce rows through shared memory).
  std::uint32_t lanes = 0;
  // Per element i < 16 of an invocation: the first element of that invocation on the same row,
  // four bits each, elements 0-7 in `first_lo` and 8-15 in `first_hi` (the shaders'
  // specialization constants).
  std::uint32_t first_lo = 0, first_hi = 0;
  bool operator==(const FragmentRows&) const = default;
};

// The layout behind a probe's output: out[r * 16 + c] = 64 l + i for element i of invocation l
// holding (r, c), out[256] = elements per invocation; `subgroup` invocations.
FragmentRows fragment_rows_of(std::span<const float> out, std::uint32_t subgroup);

// The device's layout, probed on first use (lanes 0 without cooperative matrices or subgroup
// shuffles); from a DeviceInfo, the device behind it opened (devices are shared) to run it.
FragmentRows fragment_rows(vulkan::VulkanDevice& dev);
FragmentRows fragment_rows(const DeviceInfo& dev);

}  // namespace ejk::kernels
