// Every built-in kernel and its implementations.
#include "ejk/registry.hpp"
#include "flash_attention/flash_attention.hpp"
#include "flash_attention/impls.hpp"
#include "matmul/impls.hpp"
#include "matmul/matmul.hpp"
#include "mla_attention/impls.hpp"
#include "mla_attention/mla_attention.hpp"

namespace ejk {

void register_builtin_kernels(Registry& r) {
  r.add(std::make_shared<kernels::matmul::MatmulKernel>());
  r.add(kernels::matmul::cpu_implementation());
#ifdef EJK_HAVE_OPENCL
  r.add(kernels::matmul::opencl_implementation());
#endif
#ifdef EJK_HAVE_VULKAN
  r.add(kernels::matmul::vulkan_implementation());
#endif
  r.add(std::make_shared<kernels::flash_attention::FlashAttentionKernel>());
  r.add(std::make_shared<kernels::flash_attention::FlashAttentionBwdKernel>());
  r.add(kernels::flash_attention::cpu_implementation());
  r.add(kernels::flash_attention::cpu_bwd_implementation());
#ifdef EJK_HAVE_OPENCL
  r.add(kernels::flash_attention::opencl_implementation());
  r.add(kernels::flash_attention::opencl_bwd_implementation());
#endif
#ifdef EJK_HAVE_VULKAN
  r.add(kernels::flash_attention::vulkan_implementation());
  r.add(kernels::flash_attention::vulkan_bwd_implementation());
#endif
  r.add(std::make_shared<kernels::mla_attention::MlaDecodeKernel>());
  r.add(kernels::mla_attention::cpu_implementation());
#ifdef EJK_HAVE_OPENCL
  r.add(kernels::mla_attention::opencl_implementation());
#endif
#ifdef EJK_HAVE_VULKAN
  r.add(kernels::mla_attention::vulkan_implementation());
#endif
}

}  // namespace ejk
