#pragma once
#include <string_view>

#include "ejk/export.hpp"

namespace ejk {
EJK_API std::string_view tool_version();  // "0.1.0"
EJK_API std::string_view build_info();    // compiler, build type, backends compiled in
}  // namespace ejk
