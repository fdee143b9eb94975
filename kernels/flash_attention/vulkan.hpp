#pragma once
// The Vulkan flash attention's parameters, heuristic candidates and passes, exposed so that
// block_sparse_attention can run the passes over its block lists.
#include <span>
#include <vector>

#include "ejk/kernel.hpp"
#include "flash_attention/flash_attention.hpp"
#include "flash_attention/program.hpp"

namespace ejk::kernels::flash_attention {

// The passes' parameters and constraints for problem p (variant "scalar", and for the forward
// "coopmat" where the device offers cooperative matrices), added to s after `variants` as the
// variant's first values; the scalar tile named `names`. The caller binds the problem's and the
// device's variables.
void add_vulkan_params(ParamSpace& s, std::vector<Value> variants, const Problem& p, const DeviceInfo& dev,
                       const TileNames& names = {});
// The heuristic's candidates in order of preference, named `names`.
std::vector<Config> vulkan_candidates(const DeviceInfo& dev, bool backward, const TileNames& names = {});

// The forward and backward passes of `config` on args in the order of fwd:: / bwd::, walking
// `lists` where given (its tiles must divide the lists' blocks; 16-bit storage buffers needed).
void vulkan_forward(const Problem& p, const Config& config, std::span<const Tensor> args, Device& device,
                    const BlockLists* lists = nullptr);
void vulkan_backward(const Problem& p, const Config& config, std::span<const Tensor> args, Device& device,
                     const BlockLists* lists = nullptr);

}  // namespace ejk::kernels::flash_attention
