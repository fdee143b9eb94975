#pragma once
// How far apart two workloads of one kernel are, for the configs found for one and used for the
// other: the profile tier's nearest workload and a tune's warm start.
#include <string>

#include "ejk/invocation.hpp"
#include "ejk/kernel.hpp"

namespace ejk::select {

// Sum over every dimension of |ln a - ln b|: a workload twice as large in one dimension is as
// far as one half as large. Infinite when the invocations are not of the same kind (options,
// argument count, dtypes or ranks differ).
double log_distance(const Invocation& a, const Invocation& b);

// "m 4096 for 3000, k 512 for 500": the kernel's named sizes that differ from `stored` to
// `wanted` (argument shapes where the kernel names none).
std::string differences(const Kernel& kernel, const Invocation& stored, const Invocation& wanted);

// The invocation an entry's signature (Invocation::signature's JSON) describes.
Invocation invocation_of(const std::string& kernel, const std::string& signature);

}  // namespace ejk::select
