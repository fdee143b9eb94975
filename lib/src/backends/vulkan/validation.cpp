#include "backends/vulkan/validation.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace ejk::vulkan {
namespace {

std::atomic<std::uint64_t> unexpected{0};
std::atomic<std::uint64_t> expected{0};
std::atomic<int> expecting{0};

}  // namespace

bool validation_requested() {
  const char* v = std::getenv("EJK_VULKAN_VALIDATION");
  return v && std::string(v) == "1";
}

std::uint64_t validation_messages() { return unexpected.load(); }

ExpectValidationMessages::ExpectValidationMessages() : start_(expected.load()) { ++expecting; }
ExpectValidationMessages::~ExpectValidationMessages() { --expecting; }
std::uint64_t ExpectValidationMessages::count() const { return expected.load() - start_; }

namespace detail {

void report_validation_message(bool error, const char* id, const char* text) {
  if (expecting.load() > 0) {
    ++expected;
    return;
  }
  ++unexpected;
  static std::mutex print;
  std::lock_guard lock(print);
  std::fprintf(stderr, "ejk: Vulkan validation %s [%s]: %s\n", error ? "error" : "warning", id, text);
}

}  // namespace detail
}  // namespace ejk::vulkan
