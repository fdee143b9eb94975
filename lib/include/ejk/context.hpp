#pragma once
// The entry point of the C++ API: a device, its executor and tensor factories.
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "ejk/device.hpp"
#include "ejk/executor.hpp"
#include "ejk/tensor.hpp"

namespace ejk {

class Context {
 public:
  Context();  // device from $EJK_DEVICE, else "auto"
  explicit Context(std::string_view device_name);
  explicit Context(std::shared_ptr<Device> device);

  Device& device() const { return *device_; }
  const std::shared_ptr<Device>& device_ptr() const { return device_; }
  Executor& executor() const { return *executor_; }

  Tensor empty(const Shape& shape, DType dtype) const;
  // Uniform in [-1, 1), rounded to the dtype; a fresh seed per call unless one is given.
  Tensor random(const Shape& shape, DType dtype, std::uint64_t seed = 0) const;
  Tensor from(const Shape& shape, DType dtype, std::span<const double> values) const;

 private:
  std::shared_ptr<Device> device_;
  std::unique_ptr<Executor> executor_;
};

}  // namespace ejk
