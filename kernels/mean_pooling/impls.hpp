#pragma once
// mean_pooling's and mean_pooling_bwd's implementations, one pair per backend file; registered
// by kernels/builtin.cpp.
#include <memory>

#include "ejk/kernel.hpp"
#include "mean_pooling/mean_pooling.hpp"

namespace ejk::kernels::mean_pooling {

std::shared_ptr<const Implementation> cpu_implementation(Direction dir);
#ifdef EJK_HAVE_OPENCL
std::shared_ptr<const Implementation> opencl_implementation(Direction dir);
#endif
#ifdef EJK_HAVE_VULKAN
std::shared_ptr<const Implementation> vulkan_implementation(Direction dir);
#endif

}  // namespace ejk::kernels::mean_pooling
