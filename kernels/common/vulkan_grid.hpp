#pragma once
// Vulkan implementations whose groups form one line: past the first dimension's workgroup count
// they go on as further rows of a 2D grid, which the shader folds back into one index
// (gl_WorkGroupID.y * groups_x + gl_WorkGroupID.x; a group past the last returns).
#include <algorithm>
#include <array>
#include <cstdint>
#include <string>

#include "backends/vulkan/vulkan_device.hpp"
#include "ejk/error.hpp"

namespace ejk::kernels {

// {groups_x, groups_y} holding `groups` groups on dev; throws InvalidArgument, `where` first,
// where not even the 2D grid holds them.
inline std::array<std::int64_t, 2> grid_2d(const vulkan::VulkanDevice& dev, std::int64_t groups, const std::string& where) {
  const auto& lim = dev.physical().limits;
  const std::int64_t gx = std::min<std::int64_t>(groups, lim.maxComputeWorkGroupCount[0]), gy = (groups + gx - 1) / gx;
  if (gy > lim.maxComputeWorkGroupCount[1])
    throw InvalidArgument(where + ": " + std::to_string(groups) + " groups exceed the workgroup count of " + dev.info().id());
  return {gx, gy};
}

}  // namespace ejk::kernels
