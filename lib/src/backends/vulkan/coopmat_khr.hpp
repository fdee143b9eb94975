#pragma once
// SPIR-V written against SPV_NV_cooperative_matrix, translated to SPV_KHR_cooperative_matrix.
//
// ejk's shaders are compiled with GL_NV_cooperative_matrix (the only cooperative matrices the
// glslc that builds them knows). NV matrices carry no use: a driver must keep every matrix in a
// layout any operand position can take, and NVIDIA's moves each B operand and each column-major
// load through MOVM at every multiply. A KHR matrix is declared A, B or accumulator, so the
// driver loads it straight into its operand's registers. The translation infers each matrix's
// use from where its value flows (the multiplies' operand positions, through variables, phis,
// arithmetic and element access) and retypes the module; a value that two multiplies use in
// different positions, or a conversion that changes a matrix's use, needs
// SPV_NV_cooperative_matrix2's conversions, which the result says.
#include <cstdint>
#include <span>
#include <vector>

namespace ejk::vulkan {

struct KhrModule {
  std::vector<std::uint32_t> words;  // empty: the module has no NV cooperative matrix
  bool conversions = false;          // needs CooperativeMatrixConversionsNV
};

// Throws Unsupported naming the instruction the translation cannot retype.
KhrModule coopmat_to_khr(std::span<const std::uint32_t> nv);

}  // namespace ejk::vulkan
