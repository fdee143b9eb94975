#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ejk {

using Shape = std::vector<std::int64_t>;

std::int64_t numel(const Shape& s);
std::string to_string(const Shape& s);  // "[2, 3, 4]"

}  // namespace ejk
