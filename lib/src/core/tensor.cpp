#include "ejk/tensor.hpp"

#include <cstring>
#include <string>
#include <type_traits>

#include "core/element.hpp"
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

Tensor Tensor::scratch(std::shared_ptr<Device> device, Shape shape, DType dtype) {
  Tensor t;
  t.device_ = device;
  t.spec_ = {std::move(shape), dtype};
  (void)ejk::numel(t.spec_.shape, "tensor");
  t.buffer_ = device->scratch(std::max<std::size_t>(t.bytes(), 4));
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

namespace {

template <class T>
constexpr const char* host_type() {
  if constexpr (std::is_same_v<T, double>) return "double";
  else if constexpr (std::is_same_v<T, float>) return "float";
  else if constexpr (std::is_same_v<T, std::int32_t>) return "int32";
  else return "16-bit word";
}

// True when T is the tensor's storage as it is, so elements are copied rather than converted.
// 16-bit words are only ever the storage of f16 and bf16, and refused for other dtypes.
template <class T>
bool is_storage(const Tensor& t) {
  if constexpr (std::is_same_v<T, std::uint16_t>) {
    if (t.dtype() != DType::f16 && t.dtype() != DType::bf16)
      throw InvalidArgument("16-bit words are the storage of f16 and bf16 tensors, not of a " +
                            std::string(to_string(t.dtype())) + " tensor of shape " + to_string(t.shape()));
    return true;
  }
  return (std::is_same_v<T, float> && t.dtype() == DType::f32) || (std::is_same_v<T, std::int32_t> && t.dtype() == DType::i32);
}

}  // namespace

// Elements [first, first + count) of the tensor (count -1: to the end), or InvalidArgument
// naming the tensor.
static void check_range(const Tensor& t, std::int64_t first, std::int64_t count, const char* what) {
  const bool to_end = count == -1;
  if (to_end) count = t.numel() - first;
  if (first < 0 || count < 0 || first > t.numel() || count > t.numel() - first)
    throw InvalidArgument(std::string(what) + " elements [" + std::to_string(first) + ", " +
                          (to_end ? std::string("end") : std::to_string(first + count)) + ") of a " +
                          std::string(to_string(t.dtype())) + " tensor of shape " + to_string(t.shape()) + " (" +
                          std::to_string(t.numel()) + " elements)");
}

template <class T>
static void write_values(const Tensor& t, std::span<const T> values, std::int64_t first) {
  const auto count = static_cast<std::int64_t>(values.size());
  check_range(t, first, count, "writing");
  const bool raw = is_storage<T>(t);
  if (count == 0) return;
  const std::size_t size = dtype_size(t.dtype());
  std::vector<std::byte> bytes(static_cast<std::size_t>(count) * size);
  if (raw) std::memcpy(bytes.data(), values.data(), bytes.size());
  else
    for (std::size_t i = 0; i < values.size(); ++i) store_element(t.dtype(), static_cast<double>(values[i]), bytes.data() + i * size);
  t.device().write(t.buffer(), static_cast<std::size_t>(first) * size, bytes.data(), bytes.size());
}

template <class T>
static void write_whole(const Tensor& t, std::span<const T> values) {
  if (static_cast<std::int64_t>(values.size()) != t.numel())
    throw InvalidArgument("writing " + std::to_string(values.size()) + " " + host_type<T>() + " values into a " +
                          std::string(to_string(t.dtype())) + " tensor of shape " + to_string(t.shape()) + " (" +
                          std::to_string(t.numel()) + " elements)");
  write_values(t, values, 0);
}

void Tensor::write(std::span<const double> values) const { write_whole(*this, values); }
void Tensor::write(std::span<const float> values) const { write_whole(*this, values); }
void Tensor::write(std::span<const std::int32_t> values) const { write_whole(*this, values); }
void Tensor::write(std::span<const std::uint16_t> words) const { write_whole(*this, words); }
void Tensor::write(std::span<const double> values, std::int64_t first) const { write_values(*this, values, first); }
void Tensor::write(std::span<const float> values, std::int64_t first) const { write_values(*this, values, first); }
void Tensor::write(std::span<const std::int32_t> values, std::int64_t first) const { write_values(*this, values, first); }
void Tensor::write(std::span<const std::uint16_t> words, std::int64_t first) const { write_values(*this, words, first); }

void Tensor::write_bytes(std::span<const std::byte> bytes) const {
  if (bytes.size() != this->bytes())
    throw InvalidArgument("writing " + std::to_string(bytes.size()) + " bytes into a tensor of " + std::to_string(this->bytes()));
  if (!bytes.empty()) device().write(buffer(), 0, bytes.data(), bytes.size());
}

template <class T>
std::vector<T> Tensor::read(std::int64_t first, std::int64_t count) const {
  check_range(*this, first, count, "reading");
  if (count == -1) count = numel() - first;
  const bool raw = is_storage<T>(*this);
  const std::size_t size = dtype_size(dtype());
  std::vector<std::byte> bytes(static_cast<std::size_t>(count) * size);
  if (bytes.empty()) return {};
  device().read(buffer(), static_cast<std::size_t>(first) * size, bytes.data(), bytes.size());
  std::vector<T> out(static_cast<std::size_t>(count));
  if (raw) std::memcpy(out.data(), bytes.data(), bytes.size());
  else
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<T>(load_element(dtype(), bytes.data() + i * size));
  return out;
}

template std::vector<double> Tensor::read<double>(std::int64_t, std::int64_t) const;
template std::vector<float> Tensor::read<float>(std::int64_t, std::int64_t) const;
template std::vector<std::int32_t> Tensor::read<std::int32_t>(std::int64_t, std::int64_t) const;
template std::vector<std::uint16_t> Tensor::read<std::uint16_t>(std::int64_t, std::int64_t) const;

std::vector<std::byte> Tensor::read_bytes() const {
  std::vector<std::byte> out(bytes());
  if (!out.empty()) device().read(buffer(), 0, out.data(), out.size());
  return out;
}

}  // namespace ejk
