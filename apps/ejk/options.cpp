// Exact numbers from the command line (commands.hpp).
#include <charconv>
#include <cmath>

#include <fmt/core.h>

#include "commands.hpp"
#include "ejk/error.hpp"

namespace ejk::app {

std::int64_t integer_option(const std::string& option, const std::string& text, std::int64_t min, std::int64_t max) {
  std::int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end || v < min || v > max)
    throw InvalidArgument(fmt::format("{} {}: must be an integer from {} to {}", option, text, min, max));
  return v;
}

double number_option(const std::string& option, const std::string& text, double min, double max) {
  double v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end || !std::isfinite(v) || v < min || v > max)
    throw InvalidArgument(fmt::format("{} {}: must be a number from {} to {}", option, text, min, max));
  return v;
}

}  // namespace ejk::app
