#pragma once
// grouped_matmul's and grouped_matmul_tgmm's implementations, one pair per backend file;
// registered by kernels/builtin.cpp.
#include <memory>

#include "ejk/kernel.hpp"
#include "grouped_matmul/grouped_matmul.hpp"

namespace ejk::kernels::grouped_matmul {

std::shared_ptr<const Implementation> cpu_implementation(Mode mode);
#ifdef EJK_HAVE_OPENCL
std::shared_ptr<const Implementation> opencl_implementation(Mode mode);
#endif
#ifdef EJK_HAVE_VULKAN
std::shared_ptr<const Implementation> vulkan_implementation(Mode mode);
#endif

}  // namespace ejk::kernels::grouped_matmul
