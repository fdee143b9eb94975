#pragma once
// attention_merge's implementations, one per backend file; registered by kernels/builtin.cpp.
#include <memory>

#include "ejk/kernel.hpp"

namespace ejk::kernels::attention_merge {

std::shared_ptr<const Implementation> cpu_implementation();
#ifdef EJK_HAVE_OPENCL
std::shared_ptr<const Implementation> opencl_implementation();
#endif
#ifdef EJK_HAVE_VULKAN
std::shared_ptr<const Implementation> vulkan_implementation();
#endif

}  // namespace ejk::kernels::attention_merge
