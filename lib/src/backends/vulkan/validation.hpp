#pragma once
// The Khronos validation layer, enabled by EJK_VULKAN_VALIDATION=1: every warning or error it
// reports is printed to stderr and counted, so tests can fail on any message.
#include <cstdint>

namespace ejk::vulkan {

// True when EJK_VULKAN_VALIDATION=1 asked for the layer (whether or not it is installed).
bool validation_requested();
// True when the layer and its messenger are active in this process.
bool validation_active();
// Warnings and errors reported so far, outside ExpectValidationMessages scopes.
std::uint64_t validation_messages();

// While one exists, messages are counted here instead (for tests that provoke them).
class ExpectValidationMessages {
 public:
  ExpectValidationMessages();
  ~ExpectValidationMessages();
  ExpectValidationMessages(const ExpectValidationMessages&) = delete;
  ExpectValidationMessages& operator=(const ExpectValidationMessages&) = delete;
  std::uint64_t count() const;

 private:
  std::uint64_t start_;
};

namespace detail {
// Called by the instance's debug messenger.
void report_validation_message(bool error, const char* id, const char* text);
}  // namespace detail

}  // namespace ejk::vulkan
