#include "ejk/tensor.hpp"

#include "ejk/error.hpp"

namespace ejk {

Tensor::Tensor(std::shared_ptr<Device> device, Shape shape, DType dtype)
    : device_(std::move(device)), spec_{std::move(shape), dtype} {
  (void)ejk::numel(spec_.shape, "tensor");  // refuses shapes beyond the bounds of ejk/shape.hpp
  // Zero-sized tensors still get a buffer, so every argument binds to something.
  buffer_ = device_->allocate(std::max<std::size_t>(bytes(), 4));
}

Tensor Tensor::reshaped(Shape shape) const {
  Tensor t = *this;
  t.spec_.shape = std::move(shape);
  (void)ejk::numel(t.spec_.shape, "reshaped tensor");
  if (t.numel() != numel())
    throw InvalidArgument("cannot reshape tensor " + to_string(spec_.shape) + " (" + std::to_string(numel()) +
                          " elements) to " + to_string(t.spec_.shape) + " (" + std::to_string(t.numel()) + ")");
  return t;
}

Tensor Tensor::with_spare(std::shared_ptr<Device> device, Shape shape, DType dtype, std::size_t spare_bytes) {
  Tensor t;
  t.device_ = device;
  t.spec_ = {std::move(shape), dtype};
  (void)ejk::numel(t.spec_.shape, "tensor");
  t.buffer_ = device->allocate(t.bytes() + std::max<std::size_t>(spare_bytes, 4));
  return t;
}

std::int64_t Tensor::numel() const { return ejk::numel(spec_.shape); }
std::size_t Tensor::bytes() const { return static_cast<std::size_t>(numel()) * dtype_size(spec_.dtype); }

std::int64_t Tensor::dim(int i) const {
  int r = rank();
  if (i < -r || i >= r) throw InvalidArgument("dimension " + std::to_string(i) + " out of range for shape " + to_string(shape()));
  return spec_.shape[static_cast<std::size_t>(i < 0 ? i + r : i)];
}

Device& Tensor::device() const {
  if (!device_) throw InvalidArgument("undefined tensor");
  return *device_;
}

Buffer& Tensor::buffer() const {
  if (!buffer_) throw InvalidArgument("undefined tensor");
  return *buffer_;
}

void Tensor::write(std::span<const double> values) const {
  if (static_cast<std::int64_t>(values.size()) != numel())
    throw InvalidArgument("writing " + std::to_string(values.size()) + " values into a tensor of shape " + to_string(shape()));
  write_bytes(encode(dtype(), values));
}

void Tensor::write(std::span<const float> values) const {
  std::vector<double> v(values.begin(), values.end());
  write(std::span<const double>(v));
}

void Tensor::write(std::span<const std::int32_t> values) const {
  std::vector<double> v(values.begin(), values.end());
  write(std::span<const double>(v));
}

void Tensor::write_bytes(std::span<const std::byte> bytes) const {
  if (bytes.size() != this->bytes())
    throw InvalidArgument("writing " + std::to_string(bytes.size()) + " bytes into a tensor of " + std::to_string(this->bytes()));
  if (!bytes.empty()) device().write(buffer(), 0, bytes.data(), bytes.size());
}

std::vector<double> Tensor::read() const {
  auto b = read_bytes();
  return decode(dtype(), b);
}

std::vector<std::byte> Tensor::read_bytes() const {
  std::vector<std::byte> out(bytes());
  if (!out.empty()) device().read(buffer(), 0, out.data(), out.size());
  return out;
}

}  // namespace ejk
