#pragma once
// How many groups (or tasks) of `per` items cover n: one definition for every kernel's host code,
// which unity builds compile together.
#include <cstdint>

namespace ejk::kernels {

constexpr std::int64_t ceil_div(std::int64_t n, std::int64_t per) { return (n + per - 1) / per; }

}  // namespace ejk::kernels
