#include "ejk/version.hpp"

#include <string>

#include "core/backend_registry.hpp"

namespace ejk {

std::string_view tool_version() { return EJK_VERSION; }

std::string_view build_info() {
  static const std::string info = [] {
    std::string names;
    for (const auto& b : backends::registered()) names += (names.empty() ? "" : ", ") + b.build_name;
    return "ejk " EJK_VERSION " (" EJK_BUILD_TYPE ", " EJK_COMPILER "; backends: " + names + ")";
  }();
  return info;
}

}  // namespace ejk
