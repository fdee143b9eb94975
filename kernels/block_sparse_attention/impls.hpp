#pragma once
// block_sparse_attention's and block_sparse_attention_bwd's implementations, one per backend
// file; registered by kernels/builtin.cpp.
#include <memory>

#include "ejk/kernel.hpp"

namespace ejk::kernels::block_sparse_attention {

std::shared_ptr<const Implementation> cpu_implementation();
std::shared_ptr<const Implementation> cpu_bwd_implementation();
#ifdef EJK_HAVE_OPENCL
std::shared_ptr<const Implementation> opencl_implementation();
std::shared_ptr<const Implementation> opencl_bwd_implementation();
#endif
#ifdef EJK_HAVE_VULKAN
std::shared_ptr<const Implementation> vulkan_implementation();
std::shared_ptr<const Implementation> vulkan_bwd_implementation();
#endif

}  // namespace ejk::kernels::block_sparse_attention
