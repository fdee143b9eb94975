#include "ejk/version.hpp"

namespace ejk {

std::string_view tool_version() { return EJK_VERSION; }

std::string_view build_info() {
  return "ejk " EJK_VERSION " (" EJK_BUILD_TYPE ", " EJK_COMPILER
         "; backends: cpu"
#ifdef EJK_HAVE_OPENCL
         ", opencl"
#endif
#ifdef EJK_HAVE_VULKAN
         ", vulkan"
#ifdef EJK_HAVE_COOPMAT
         " +coopmat"
#endif
#endif
         ")";
}

}  // namespace ejk
