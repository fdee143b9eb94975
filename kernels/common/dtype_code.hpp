#pragma once
// The storage dtype codes of the device preludes (common/clc.h, common/vulkan.glsl): what a host
// passes as a -D option, a kernel argument or a push constant must be what the codecs there test.
#include "ejk/dtype.hpp"

namespace ejk::kernels {

// 0 f32, 1 f16, 2 bf16.
constexpr int dtype_code(DType t) { return t == DType::f32 ? 0 : t == DType::f16 ? 1 : 2; }

}  // namespace ejk::kernels
