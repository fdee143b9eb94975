#include "ejk/context.hpp"

#include <atomic>
#include <cmath>
#include <random>

namespace ejk {

Context::Context() : Context(default_device_name()) {}
Context::Context(std::string_view device_name) : Context(open_device(device_name)) {}
Context::Context(std::shared_ptr<Device> device)
    : device_(std::move(device)), executor_(std::make_unique<Executor>(device_)) {}

Tensor Context::empty(const Shape& shape, DType dtype) const { return Tensor(device_, shape, dtype); }

Tensor Context::random(const Shape& shape, DType dtype, std::uint64_t seed) const {
  static std::atomic<std::uint64_t> counter{0x9e3779b97f4a7c15ull};
  if (seed == 0) seed = counter.fetch_add(0x9e3779b97f4a7c15ull) ^ std::random_device{}();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> v(static_cast<std::size_t>(numel(shape)));
  for (auto& x : v) x = dtype == DType::i32 ? std::floor(dist(rng) * 100) : dist(rng);
  return from(shape, dtype, v);
}

Tensor Context::from(const Shape& shape, DType dtype, std::span<const double> values) const {
  Tensor t = empty(shape, dtype);
  t.write(values);
  return t;
}

}  // namespace ejk
