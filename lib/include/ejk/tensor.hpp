#pragma once
// A contiguous row-major array of one dtype in a device buffer.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "ejk/device.hpp"
#include "ejk/dtype.hpp"
#include "ejk/export.hpp"
#include "ejk/shape.hpp"

namespace ejk {

// Shape and dtype without data: what an invocation's signature records.
struct TensorSpec {
  Shape shape;
  DType dtype = DType::f32;
  bool operator==(const TensorSpec&) const = default;
};

class EJK_API Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Device> device, Shape shape, DType dtype);
  // A tensor whose buffer holds `spare_bytes` beyond its data (buffer().bytes() counts them,
  // bytes() does not): room for a canary pattern that reveals out-of-bounds writes.
  static Tensor with_spare(std::shared_ptr<Device> device, Shape shape, DType dtype, std::size_t spare_bytes);
  // Working memory from Device::scratch, contents undefined: a device that recycles released
  // buffers (CUDA, where an allocation and its free cost more than much of the work) may hand out
  // one released earlier, so work that uses it must be submitted after that release.
  static Tensor scratch(std::shared_ptr<Device> device, Shape shape, DType dtype);
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

  // Host transfers. Values convert to and from the storage dtype (f16/bf16 round to nearest
  // even); 16-bit words are the storage of an f16 or bf16 tensor as they are, and only those.
  // One argument: the whole tensor, the span's size must be numel(). With `first`: elements
  // first .. first + size - 1 of the row-major order, and nothing else is touched or moved.
  void write(std::span<const double> values) const;
  void write(std::span<const float> values) const;
  void write(std::span<const std::int32_t> values) const;
  void write(std::span<const std::uint16_t> words) const;
  void write(std::span<const double> values, std::int64_t first) const;
  void write(std::span<const float> values, std::int64_t first) const;
  void write(std::span<const std::int32_t> values, std::int64_t first) const;
  void write(std::span<const std::uint16_t> words, std::int64_t first) const;
  void write_bytes(std::span<const std::byte> bytes) const;
  // T: double, float, std::int32_t or std::uint16_t (words of f16/bf16). `count` -1: to the end.
  // Reads only the slice's bytes from the device.
  template <class T = double>
  std::vector<T> read(std::int64_t first = 0, std::int64_t count = -1) const;
  std::vector<std::byte> read_bytes() const;

 private:
  std::shared_ptr<Device> device_;
  std::shared_ptr<Buffer> buffer_;
  TensorSpec spec_;
};

// Fills the tensor with values uniform in [lo, hi), the same for a seed and element count on
// every device and every run (docs/library.md#random-values): element i is
//   u = (word_i >> 8) * 2^-24 with word_i = Philox4x32-10(counter (i / 4 mod 2^32, i / 2^34,
//       0x66696c6c, 0), key (seed mod 2^32, seed / 2^32)), lane i % 4,
//   x = (hi - lo) * u + lo in float, two correctly rounded steps (never fused), then rounded to
//   the dtype (i32: floor of it).
// Written by the device's own code where the backend has it (OpenCL, Vulkan), else made on the
// host a slice at a time and uploaded: host memory stays a few MiB whatever the tensor's size.
EJK_API void fill_uniform(const Tensor& t, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f);

extern template std::vector<double> Tensor::read<double>(std::int64_t, std::int64_t) const;
extern template std::vector<float> Tensor::read<float>(std::int64_t, std::int64_t) const;
extern template std::vector<std::int32_t> Tensor::read<std::int32_t>(std::int64_t, std::int64_t) const;
extern template std::vector<std::uint16_t> Tensor::read<std::uint16_t>(std::int64_t, std::int64_t) const;

}  // namespace ejk
