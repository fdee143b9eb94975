#include "ejk/shape.hpp"

#include "ejk/error.hpp"

namespace ejk {

std::int64_t numel(const Shape& s, std::string_view what) {
  auto fail = [&](const std::string& why) {
    throw InvalidArgument(std::string(what) + " " + to_string(s) + ": " + why);
  };
  if (s.size() > max_rank)
    fail("rank " + std::to_string(s.size()) + " is above the limit of " + std::to_string(max_rank));
  std::int64_t n = 1, extent = 1;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const std::int64_t d = s[i];
    if (d < 0) fail("dimension " + std::to_string(i) + " is negative (" + std::to_string(d) + ")");
    if (d > max_dim)
      fail("dimension " + std::to_string(i) + " is " + std::to_string(d) + ", above the limit of 2^31-1");
    // extent and d are both at most 2^40 here, so the product cannot overflow before the test.
    if (d > 1 && extent > max_elements / d)
      fail("more than 2^40 elements (the limit of one tensor)");
    extent *= d > 1 ? d : 1;
    n *= d;
  }
  return n;
}

std::string to_string(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

}  // namespace ejk
