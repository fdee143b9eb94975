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

// __COUNTER__, not __LINE__: unity builds put several files in one translation unit.
#define EJK_BUILTIN(stage, key) EJK_BUILTIN_AT(stage, key, __COUNTER__)
#define EJK_BUILTIN_AT(stage, key, n) EJK_BUILTIN_AT2(stage, key, n)
#define EJK_BUILTIN_AT2(stage, key, n)                                                                  \
  static void ejk_builtin_add_##n(::ejk::Registry& r);                                                  \
  static const ::ejk::kernels::Builtin ejk_builtin_##n{::ejk::kernels::Stage::stage, key, &ejk_builtin_add_##n}; \
  static void ejk_builtin_add_##n(::ejk::Registry& r)
