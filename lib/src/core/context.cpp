#include "ejk/context.hpp"

#include <cmath>
#include <random>

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
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> v(static_cast<std::size_t>(numel(shape, "random tensor")));
  for (auto& x : v) x = dtype == DType::i32 ? std::floor(dist(rng) * 100) : dist(rng);
  return from(shape, dtype, v);
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
