#pragma once
// Whether a Vulkan device runs the attention shaders' cooperative-matrix passes (flash attention,
// the decode engine, mla_decode): built with cooperative matrices, 16-bit storage and float16
// arithmetic, full subgroups (the shaders' lanes own fixed fragment elements) of one of
// `subgroups`, and 16x16x16 f16 x f16 -> f32 fragments listed.
#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "backends/vulkan/instance.hpp"
#include "ejk/device.hpp"

namespace ejk::kernels {

inline bool f16_fragments(const DeviceInfo& dev, std::initializer_list<std::uint32_t> subgroups) {
#ifdef EJK_HAVE_COOPMAT
  const auto& pd = vulkan::physical_device(dev.index);
  return pd.storage16 && pd.float16 && pd.full_subgroups &&
         std::find(subgroups.begin(), subgroups.end(), dev.subgroup_size) != subgroups.end() &&
         dev.offers({16, 16, 16, DType::f16, DType::f32});
#else
  (void)dev;
  (void)subgroups;
  return false;
#endif
}

}  // namespace ejk::kernels
