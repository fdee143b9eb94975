#pragma once
// decode_attention.cl's pass 2 (decode_reduce), launched the same way by every implementation
// that runs the engine's OpenCL C: OpenCL's, and CUDA's after its native pass 1 (defined in
// opencl.cpp, which is built wherever either backend is).
#include <cstdint>
#include <span>

#include "backends/clc/clc_device.hpp"
#include "decode_attention/engine.hpp"

namespace ejk::kernels::decode_attention {

// Merges the `splits` parts in `acc` and `ml` (pass 1's f32 scratch) into the call's out.
void launch_reduce(clc::Device& dev, clc::Kernel& reduce, const Engine& e, const Buffer& acc, const Buffer& ml,
                   std::span<const Tensor> args, std::int64_t splits);

}  // namespace ejk::kernels::decode_attention
