#pragma once
// The linear-attention kernels' implementations, one per backend file; registered by
// kernels/builtin.cpp for every (variant, direction).
#include <memory>

#include "ejk/kernel.hpp"
#include "linear_attention/linear_attention.hpp"

namespace ejk::kernels::linear_attention {

std::shared_ptr<const Implementation> cpu_implementation(Variant v, bool backward);
#ifdef EJK_HAVE_OPENCL
std::shared_ptr<const Implementation> opencl_implementation(Variant v, bool backward);
#endif
#ifdef EJK_HAVE_VULKAN
std::shared_ptr<const Implementation> vulkan_implementation(Variant v, bool backward);
#endif

}  // namespace ejk::kernels::linear_attention
