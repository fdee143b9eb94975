#pragma once
// Registration from inside each kernel's folder: a kernel's host file adds the kernel, and each
// backend file adds that backend's implementations, compiled only with that backend, so neither
// a new kernel nor a new backend edits a central list. Registry::global() runs every
// registration, kernels before implementations, each stage in key order, so the registry is the
// same whatever order the linker put the files in.
//
//   EJK_BUILTIN(kernels, "matmul") { r.add(std::make_shared<MatmulKernel>()); }
//   EJK_BUILTIN(implementations, "matmul/opencl") { r.add(std::make_shared<OpenCLMatmul>()); }
#include <cstdint>

#include "ejk/registry.hpp"

namespace ejk::kernels {

enum class Stage : std::uint8_t { kernels, implementations };

// Holds one registration; constructed at namespace scope by EJK_BUILTIN.
class Builtin {
 public:
  using Add = void (*)(Registry&);
  Builtin(Stage stage, const char* key, Add add);
};

}  // namespace ejk::kernels

#define EJK_BUILTIN_JOIN2(a, b) a##b
#define EJK_BUILTIN_JOIN(a, b) EJK_BUILTIN_JOIN2(a, b)
#define EJK_BUILTIN(stage, key)                                                                           \
  static void EJK_BUILTIN_JOIN(ejk_builtin_add_, __LINE__)(::ejk::Registry & r);                          \
  static const ::ejk::kernels::Builtin EJK_BUILTIN_JOIN(ejk_builtin_, __LINE__){                          \
      ::ejk::kernels::Stage::stage, key, &EJK_BUILTIN_JOIN(ejk_builtin_add_, __LINE__)};                  \
  static void EJK_BUILTIN_JOIN(ejk_builtin_add_, __LINE__)(::ejk::Registry & r)
