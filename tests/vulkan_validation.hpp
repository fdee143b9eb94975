#pragma once
// Fails whichever test was running when the Vulkan validation layer (EJK_VULKAN_VALIDATION=1:
// core and synchronization validation) reported a warning or error, so every test of a program
// that installs it runs under validation.
#include <cstdint>

#include <gtest/gtest.h>

#include "backends/vulkan/validation.hpp"

namespace ejk::test {

class VulkanValidationListener : public ::testing::EmptyTestEventListener {
  // Messages before the first test (instance creation, device listing) count against it.
  void OnTestEnd(const ::testing::TestInfo& /*info*/) override {
    std::uint64_t now = vulkan::validation_messages();
    if (now > blamed_)
      ADD_FAILURE() << (now - blamed_) << " Vulkan validation message(s) during this test (printed above)";
    blamed_ = now;
  }
  std::uint64_t blamed_ = 0;
};

// gtest sends end events to listeners in reverse order: appended after the result printer, the
// listener reports before the printer writes the test's verdict.
inline void install_vulkan_validation_listener() {
  ::testing::UnitTest::GetInstance()->listeners().Append(new VulkanValidationListener);
}

}  // namespace ejk::test
