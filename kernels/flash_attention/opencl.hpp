#pragma once
// The OpenCL flash attention's parameter spaces, heuristics and passes, exposed so that tests can
// check a GPU's space and configs on any OpenCL device and block_sparse_attention can run the
// passes over its block lists.
#include <span>
#include <vector>

#include "ejk/kernel.hpp"
#include "flash_attention/flash_attention.hpp"
#include "flash_attention/program.hpp"

namespace ejk::kernels::flash_attention {

// CPU devices (PoCL, ...) get smaller workgroups; GPUs 32 to 256 work-items.
ParamSpace opencl_space(const Invocation& inv, const DeviceInfo& dev, bool backward, bool cpu_family);
Config opencl_heuristic(const Invocation& inv, const DeviceInfo& dev, bool backward, bool cpu_family);

// The passes' parameters and constraints for problem p (variant "scalar", and "mma" where the
// device offers it), added to s after `variants` as the variant's first values; the scalar tile
// named `names`. The constraints read seq_q, seq_k and head_dim, which the caller binds.
void add_opencl_params(ParamSpace& s, std::vector<Value> variants, const Problem& p, const DeviceInfo& dev,
                       bool cpu_family, const TileNames& names = {});
// The heuristic's candidates in order of preference, named `names`; the backward's fused dq first
// where the device adds four floats with one red (`vector_red`).
std::vector<Config> opencl_candidates(bool backward, bool cpu_family, bool vector_red, const TileNames& names = {});
// Whether the device adds four floats with one red (PTX's vector red.global.add, sm_90 on).
bool vector_red(const DeviceInfo& info);

// The forward and backward passes of `config` (a config of opencl_space) on args in the order of
// fwd:: / bwd::, walking `lists` where given (its tiles must divide the lists' blocks).
void opencl_forward(const Problem& p, const Config& config, std::span<const Tensor> args, Device& device,
                    const BlockLists* lists = nullptr);
void opencl_backward(const Problem& p, const Config& config, std::span<const Tensor> args, Device& device,
                     const BlockLists* lists = nullptr);

}  // namespace ejk::kernels::flash_attention
