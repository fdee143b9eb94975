#pragma once
#include <string_view>

namespace ejk {
std::string_view tool_version();  // "0.1.0"
std::string_view build_info();    // compiler, build type, backends compiled in
}  // namespace ejk
