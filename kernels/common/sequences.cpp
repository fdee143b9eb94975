#include "common/sequences.hpp"

#include <string>

#include "ejk/error.hpp"

namespace ejk::kernels {

void check_cu_seqlens(std::span<const std::int64_t> c, const char* name, std::int64_t total) {
  auto list = [&] {
    std::string s = "[";
    for (std::size_t i = 0; i < c.size() && i < 12; ++i) s += (i ? ", " : "") + std::to_string(c[i]);
    return s + (c.size() > 12 ? ", ...]" : "]");
  };
  if (c.empty() || c[0] != 0) throw InvalidArgument(std::string(name) + " " + list() + " must start at 0");
  for (std::size_t i = 1; i < c.size(); ++i)
    if (c[i] < c[i - 1])
      throw InvalidArgument(std::string(name) + " " + list() + " decreases at index " + std::to_string(i) + " (" +
                            std::to_string(c[i - 1]) + " then " + std::to_string(c[i]) + ")");
  if (c.back() != total)
    throw InvalidArgument(std::string(name) + " " + list() + " ends at " + std::to_string(c.back()) +
                          ", not at the token count " + std::to_string(total));
}

}  // namespace ejk::kernels
