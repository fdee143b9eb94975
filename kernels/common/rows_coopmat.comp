#version 450
// The element layout of a subgroup's 16x16 f32 cooperative matrix, which GL_NV_cooperative_matrix
// leaves to the implementation: element i of invocation l holds 64 l + i, the matrix is stored
// row-major at out[0, 256) and its length (elements per invocation) at out[256]. The host reads
// which invocations and elements hold each row (kernels/common/vulkan_fragment_rows.hpp).
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

layout(binding = 0) buffer Out { float v[]; };

void main() {
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> f = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
  for (int i = 0; i < f.length(); ++i) f[i] = float(gl_SubgroupInvocationID * 64u + uint(i));
  coopMatStoreNV(f, v, 0, 16, false);
  if (gl_SubgroupInvocationID == 0u) v[256] = float(f.length());
}
