#pragma once
// The device backends' (OpenCL, Vulkan) parameter space and heuristic for add. Both run one
// plan: a group owns one block of threads * vec consecutive elements, each work-item vec
// contiguous ones (one vector load per input, one vector store), consecutive work-items on
// consecutive vectors so that every access is coalesced; the last partial vector, where numel
// is not a multiple of vec, goes element by element.
#include "add/add.hpp"
#include "common/ceil_div.hpp"
#include "ejk/kernel.hpp"

namespace ejk::kernels::add {

// threads: work-items per group; vec: elements per work-item, loaded and stored as one vector.
ParamSpace device_space(const Invocation& inv, const DeviceInfo& dev);
// vec 4 (16-byte f32 accesses); the largest group that still leaves groups for every compute
// unit (four per unit on GPUs, two per core on CPU-hosted drivers such as PoCL and lavapipe).
Config device_heuristic(const Invocation& inv, const DeviceInfo& dev, bool gpu);
// Throws InvalidArgument for a config the kernels cannot run (one that did not come from the space).
void check_config(std::string_view where, const Config& c);

// Groups of the launch: one per block of threads * vec elements.
inline std::int64_t groups(std::int64_t numel, const Config& c) { return ceil_div(numel, c.get("threads") * c.get("vec")); }

}  // namespace ejk::kernels::add
