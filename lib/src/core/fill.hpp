#pragma once
// What backends with a device fill (kernels/common/fill.cl, fill.comp) share: they write whole
// Philox blocks of four elements and leave the ragged ends to Device::fill_uniform on the host.
#include <cstdint>

#include "ejk/dtype.hpp"

namespace ejk {

// Elements [begin, end) of [first, first + count) that form whole blocks (begin and end
// multiples of 4; begin == end when there are none).
struct FillBlocks {
  std::int64_t begin = 0, end = 0;
};
FillBlocks fill_blocks(std::int64_t first, std::int64_t count);

// The dtype code the device fills take: 0 f32, 1 f16, 2 bf16, 3 i32.
std::uint32_t fill_code(DType t);

}  // namespace ejk
