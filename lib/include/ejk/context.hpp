#pragma once
// The entry point of the C++ API: a device, its executor and tensor factories.
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "ejk/device.hpp"
#include "ejk/executor.hpp"
#include "ejk/export.hpp"
#include "ejk/tensor.hpp"

namespace ejk {

class EJK_API Context {
 public:
  Context();  // device from $EJK_DEVICE, else "auto"
  explicit Context(std::string_view device_name);
  explicit Context(std::shared_ptr<Device> device);

  Device& device() const { return *device_; }
  const std::shared_ptr<Device>& device_ptr() const { return device_; }
  Executor& executor() const { return *executor_; }

  Tensor empty(const Shape& shape, DType dtype) const;
  // Uniform in [-1, 1) rounded to the dtype (i32: integers in [-100, 100)), by fill_uniform:
  // the same values on every device for a seed. Without a seed, the context's next one: a
  // program makes the same tensors on every run, and each call a different one. seed(s)
  // restarts that sequence; a context starts it at 1.
  Tensor random(const Shape& shape, DType dtype) const;
  Tensor random(const Shape& shape, DType dtype, std::uint64_t seed) const;
  void seed(std::uint64_t s) { next_seed_ = s; }
  // A tensor holding `values` (converted to the dtype as Tensor::write does).
  Tensor from(const Shape& shape, DType dtype, std::span<const double> values) const;
  Tensor from(const Shape& shape, DType dtype, std::span<const float> values) const;
  Tensor from(const Shape& shape, DType dtype, std::span<const std::int32_t> values) const;
  Tensor from(const Shape& shape, DType dtype, std::span<const std::uint16_t> words) const;

 private:
  std::shared_ptr<Device> device_;
  std::unique_ptr<Executor> executor_;
  mutable std::uint64_t next_seed_ = 1;
};

}  // namespace ejk
