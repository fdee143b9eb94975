#pragma once
// What backends with a device fill (kernels/common/fill.cl, fill.comp) share: they override
// Device::fill_blocks, which gets whole Philox blocks of four elements.
#include <cstdint>

#include "ejk/dtype.hpp"

namespace ejk {

// The dtype code the device fills take: 0 f32, 1 f16, 2 bf16, 3 i32.
std::uint32_t fill_code(DType t);

}  // namespace ejk
