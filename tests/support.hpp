#pragma once
// Helpers shared by the tests: the devices under test and result comparison.
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ejk/ejk.hpp"

namespace ejk::test {

// Every device present. Under CI=true, all three backends must be there.
inline std::vector<std::string> devices() {
  std::vector<std::string> out;
  for (const auto& d : list_devices()) out.push_back(d.id());
  return out;
}

inline bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci && std::string(ci) == "true";
}

// Largest error relative to the largest reference magnitude (a normwise check that does
// not blow up where the reference crosses zero). NaN fails outright, and so does an infinity
// unless the reference has the same one there (the -inf log-sum-exp of a fully masked row).
inline double relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (std::isinf(got[i]) && got[i] == want[i]) continue;
    if (!std::isfinite(got[i]) || !std::isfinite(want[i])) return INFINITY;
    err = std::max(err, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return scale > 0 ? err / scale : err;
}

// A name gtest accepts for a device id ("opencl:0" -> "opencl_0").
inline std::string test_name(std::string id) {
  for (auto& c : id)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return id;
}

}  // namespace ejk::test
