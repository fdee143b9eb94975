#pragma once
// Parameter spaces, heuristics and tile sizes of the GPU-style backends (OpenCL, Vulkan), which
// run the same device programs.
//   recurrent(_bwd):            block_v (value columns per group), k_split (work-items per column,
//                               each holding every k_split-th state row in registers)
//   gla(_bwd), lightning(_bwd): chunk (tokens per chunk), block_v, threads
#include <cstdint>

#include "ejk/kernel.hpp"
#include "linear_attention/linear_attention.hpp"

namespace ejk::kernels::linear_attention {

// Work-items of the backward's gate pass.
constexpr std::int64_t gate_threads = 64;

struct Tiles {
  std::int64_t block_v = 8, k_split = 1, chunk = 0, group = 64;  // chunk 0: the token kernel
  std::int64_t threads(std::int64_t /*R*/) const { return chunk ? group : block_v * k_split; }
};

ParamSpace device_space(Variant v, bool backward, const Invocation& inv, const DeviceInfo& dev);
Config device_heuristic(Variant v, bool backward, const Invocation& inv, const DeviceInfo& dev, bool gpu);
// Throws InvalidArgument naming the config when a value is not one the programs take.
Tiles tiles_of(Variant v, const Config& config);

}  // namespace ejk::kernels::linear_attention
