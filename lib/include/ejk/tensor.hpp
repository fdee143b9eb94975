#pragma once
// A contiguous row-major array of one dtype in a device buffer.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "ejk/device.hpp"
#include "ejk/dtype.hpp"
#include "ejk/shape.hpp"

namespace ejk {

// Shape and dtype without data: what an invocation's signature records.
struct TensorSpec {
  Shape shape;
  DType dtype = DType::f32;
  bool operator==(const TensorSpec&) const = default;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Device> device, Shape shape, DType dtype);
  // A tensor whose buffer holds `spare_bytes` beyond its data (buffer().bytes() counts them,
  // bytes() does not): room for a canary pattern that reveals out-of-bounds writes.
  static Tensor with_spare(std::shared_ptr<Device> device, Shape shape, DType dtype, std::size_t spare_bytes);
  // The same buffer seen with another shape of the same element count (no copy): writes
  // through either are seen by both. Throws InvalidArgument when the counts differ.
  Tensor reshaped(Shape shape) const;

  const Shape& shape() const { return spec_.shape; }
  DType dtype() const { return spec_.dtype; }
  const TensorSpec& spec() const { return spec_; }
  std::int64_t numel() const;
  std::size_t bytes() const;
  std::int64_t dim(int i) const;  // negative counts from the end
  int rank() const { return static_cast<int>(spec_.shape.size()); }
  bool defined() const { return buffer_ != nullptr; }

  Device& device() const;
  const std::shared_ptr<Device>& device_ptr() const { return device_; }
  Buffer& buffer() const;

  // Host transfers, converting to and from the storage dtype.
  void write(std::span<const double> values) const;
  void write(std::span<const float> values) const;
  void write(std::span<const std::int32_t> values) const;
  void write_bytes(std::span<const std::byte> bytes) const;
  std::vector<double> read() const;
  std::vector<std::byte> read_bytes() const;

 private:
  std::shared_ptr<Device> device_;
  std::shared_ptr<Buffer> buffer_;
  TensorSpec spec_;
};

}  // namespace ejk
