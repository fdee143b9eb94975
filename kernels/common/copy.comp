#version 450
// A device-to-device copy in a compute shader (VulkanDevice::copy's shader path). NVIDIA's driver
// runs vkCmdCopyBuffer at about 850 GB/s on an H100, against about 3 TB/s for the SM copies of
// OpenCL and CUDA, and every Vulkan bandwidth figure is measured against this copy.
// 16-byte vectors: a warp moves 512 contiguous bytes per access, the widest load the SMs issue.
// The host records bytes outside the 16-byte-aligned body with vkCmdCopyBuffer.
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

// Distinct buffers, or disjoint ranges of one (a copy's ranges never overlap): restrict lets the
// compiler issue every load of an iteration before its stores.
layout(std430, binding = 0) restrict readonly buffer Src { uvec4 src[]; };
layout(std430, binding = 1) restrict writeonly buffer Dst { uvec4 dst[]; };

// Vector indices: a storage buffer holds at most 4 GiB (maxStorageBufferRange is 32-bit), so
// every index and every sum below stays under 2^32.
layout(push_constant) uniform Push {
  uint src0, dst0, count;
} pc;

// Loads in flight per thread before the first store: enough to cover HBM latency with a
// single pass over a few hundred MiB.
const uint unroll = 4u;

void main() {
  const uint threads = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint base = gl_GlobalInvocationID.x; base < pc.count; base += threads * unroll) {
    uvec4 v[unroll];
    for (uint u = 0u; u < unroll; ++u) {
      const uint i = base + u * threads;
      if (i < pc.count) v[u] = src[pc.src0 + i];
    }
    for (uint u = 0u; u < unroll; ++u) {
      const uint i = base + u * threads;
      if (i < pc.count) dst[pc.dst0 + i] = v[u];
    }
  }
}
