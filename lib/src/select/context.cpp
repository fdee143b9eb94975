#include "ejk/context.hpp"

#include <cmath>

namespace ejk {

Context::Context() : Context(default_device_name()) {}
Context::Context(std::string_view device_name) : Context(open_device(device_name)) {}
Context::Context(std::shared_ptr<Device> device)
    : device_(std::move(device)), executor_(std::make_unique<Executor>(device_)) {}

Tensor Context::empty(const Shape& shape, DType dtype) const { return Tensor(device_, shape, dtype); }

Tensor Context::random(const Shape& shape, DType dtype) const {
  // Seeds 1, 2, 3, ... spread apart, so that consecutive calls share no generator state.
  const std::uint64_t seed = (next_seed_++) * 0x9e3779b97f4a7c15ull;
  return random(shape, dtype, seed);
}

Tensor Context::random(const Shape& shape, DType dtype, std::uint64_t seed) const {
  Tensor t = empty(shape, dtype);
  if (dtype == DType::i32) fill_uniform(t, seed, -100.0f, 100.0f);
  else fill_uniform(t, seed);
  return t;
}

template <class T>
static Tensor make(const Context& ctx, const Shape& shape, DType dtype, std::span<const T> values) {
  Tensor t = ctx.empty(shape, dtype);
  t.write(values);
  return t;
}

Tensor Context::from(const Shape& shape, DType dtype, std::span<const double> values) const {
  return make(*this, shape, dtype, values);
}
Tensor Context::from(const Shape& shape, DType dtype, std::span<const float> values) const {
  return make(*this, shape, dtype, values);
}
Tensor Context::from(const Shape& shape, DType dtype, std::span<const std::int32_t> values) const {
  return make(*this, shape, dtype, values);
}
Tensor Context::from(const Shape& shape, DType dtype, std::span<const std::uint16_t> words) const {
  return make(*this, shape, dtype, words);
}

}  // namespace ejk
