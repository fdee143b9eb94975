// Every built-in kernel and its implementations.
#include "attention_merge/attention_merge.hpp"
#include "attention_merge/impls.hpp"
#include "block_sparse_attention/block_sparse_attention.hpp"
#include "block_sparse_attention/impls.hpp"
#include "decode_attention/impls.hpp"
#include "ejk/registry.hpp"
#include "flash_attention/flash_attention.hpp"
#include "flash_attention/impls.hpp"
#include "grouped_matmul/grouped_matmul.hpp"
#include "grouped_matmul/impls.hpp"
#include "linear_attention/impls.hpp"
#include "matmul/impls.hpp"
#include "matmul/matmul.hpp"
#include "mean_pooling/impls.hpp"
#include "mean_pooling/mean_pooling.hpp"
#include "mla_attention/impls.hpp"
#include "mla_attention/mla_attention.hpp"
#include "native_sparse_attention/impls.hpp"
#include "native_sparse_attention/nsa.hpp"
#include "page_attention/page_attention.hpp"
#include "ragged_decode_attention/ragged_decode_attention.hpp"
#include "ragged_page_attention/ragged_page_attention.hpp"

namespace ejk {

namespace {
// A kernel run by the decode engine, with the engine's implementation on every backend.
void add_decode_kernel(Registry& r, std::shared_ptr<const Kernel> k, kernels::decode_attention::EngineOf engine) {
  namespace da = kernels::decode_attention;
  const da::Binding b{std::string(k->name()), k->args(), engine};
  r.add(std::move(k));
  r.add(da::cpu_implementation(b));
#ifdef EJK_HAVE_OPENCL
  r.add(da::opencl_implementation(b));
#endif
#ifdef EJK_HAVE_VULKAN
  r.add(da::vulkan_implementation(b));
#endif
}
}  // namespace

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
  r.add(std::make_shared<kernels::native_sparse_attention::NsaKernel>());
  r.add(std::make_shared<kernels::native_sparse_attention::NsaBwdKernel>());
  r.add(kernels::native_sparse_attention::cpu_implementation());
  r.add(kernels::native_sparse_attention::cpu_bwd_implementation());
#ifdef EJK_HAVE_OPENCL
  r.add(kernels::native_sparse_attention::opencl_implementation());
  r.add(kernels::native_sparse_attention::opencl_bwd_implementation());
#endif
#ifdef EJK_HAVE_VULKAN
  r.add(kernels::native_sparse_attention::vulkan_implementation());
  r.add(kernels::native_sparse_attention::vulkan_bwd_implementation());
#endif
  r.add(std::make_shared<kernels::block_sparse_attention::BlockSparseAttentionKernel>());
  r.add(std::make_shared<kernels::block_sparse_attention::BlockSparseAttentionBwdKernel>());
  r.add(kernels::block_sparse_attention::cpu_implementation());
  r.add(kernels::block_sparse_attention::cpu_bwd_implementation());
#ifdef EJK_HAVE_OPENCL
  r.add(kernels::block_sparse_attention::opencl_implementation());
  r.add(kernels::block_sparse_attention::opencl_bwd_implementation());
#endif
#ifdef EJK_HAVE_VULKAN
  r.add(kernels::block_sparse_attention::vulkan_implementation());
  r.add(kernels::block_sparse_attention::vulkan_bwd_implementation());
#endif
  for (auto v : {kernels::linear_attention::Variant::recurrent, kernels::linear_attention::Variant::gla,
                 kernels::linear_attention::Variant::lightning})
    for (bool backward : {false, true}) {
      r.add(std::make_shared<kernels::linear_attention::LinearAttentionKernel>(v, backward));
      r.add(kernels::linear_attention::cpu_implementation(v, backward));
#ifdef EJK_HAVE_OPENCL
      r.add(kernels::linear_attention::opencl_implementation(v, backward));
#endif
#ifdef EJK_HAVE_VULKAN
      r.add(kernels::linear_attention::vulkan_implementation(v, backward));
#endif
    }
  add_decode_kernel(r, std::make_shared<kernels::page_attention::PageAttentionKernel>(), kernels::page_attention::engine);
  add_decode_kernel(r, std::make_shared<kernels::ragged_decode_attention::RaggedDecodeAttentionKernel>(),
                    kernels::ragged_decode_attention::engine);
  add_decode_kernel(r, std::make_shared<kernels::ragged_page_attention::RaggedPageAttentionKernel>(),
                    kernels::ragged_page_attention::engine);
  r.add(std::make_shared<kernels::attention_merge::AttentionMergeKernel>());
  r.add(kernels::attention_merge::cpu_implementation());
#ifdef EJK_HAVE_OPENCL
  r.add(kernels::attention_merge::opencl_implementation());
#endif
#ifdef EJK_HAVE_VULKAN
  r.add(kernels::attention_merge::vulkan_implementation());
#endif
  for (auto dir : {kernels::mean_pooling::Direction::forward, kernels::mean_pooling::Direction::backward}) {
    r.add(std::make_shared<kernels::mean_pooling::MeanPoolingKernel>(dir));
    r.add(kernels::mean_pooling::cpu_implementation(dir));
#ifdef EJK_HAVE_OPENCL
    r.add(kernels::mean_pooling::opencl_implementation(dir));
#endif
#ifdef EJK_HAVE_VULKAN
    r.add(kernels::mean_pooling::vulkan_implementation(dir));
#endif
  }
  for (auto mode : {kernels::grouped_matmul::Mode::gmm, kernels::grouped_matmul::Mode::tgmm}) {
    r.add(std::make_shared<kernels::grouped_matmul::GroupedMatmulKernel>(mode));
    r.add(kernels::grouped_matmul::cpu_implementation(mode));
#ifdef EJK_HAVE_OPENCL
    r.add(kernels::grouped_matmul::opencl_implementation(mode));
#endif
#ifdef EJK_HAVE_VULKAN
    r.add(kernels::grouped_matmul::vulkan_implementation(mode));
#endif
  }
}

}  // namespace ejk
