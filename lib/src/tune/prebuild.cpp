#include "tune/prebuild.hpp"

#include <algorithm>

namespace ejk::tuning {

Prebuilder::Prebuilder(const Invocation& inv, const Implementation& impl, Device& device, int threads)
    : inv_(inv), impl_(impl), device_(device) {
  for (int t = 0; t < threads; ++t) threads_.emplace_back([this](const std::stop_token& stop) { work(stop); });
}

Prebuilder::~Prebuilder() {
  {
    std::lock_guard lock(mutex_);
    queue_.clear();
  }
  for (auto& t : threads_) t.request_stop();
  ready_.notify_all();
  threads_.clear();  // joins
}

void Prebuilder::plan(const std::vector<Config>& configs) {
  {
    std::lock_guard lock(mutex_);
    queue_.assign(configs.begin(), configs.end());
  }
  ready_.notify_all();
}

std::size_t Prebuilder::started() const {
  std::lock_guard lock(mutex_);
  return started_;
}

void Prebuilder::work(const std::stop_token& stop) {
  for (;;) {
    Config next;
    {
      std::unique_lock lock(mutex_);
      if (!ready_.wait(lock, stop, [&] { return !queue_.empty(); })) return;
      next = std::move(queue_.front());
      queue_.pop_front();
      ++started_;
    }
    try {
      impl_.prepare(inv_, next, device_);
    } catch (...) {
      // The candidate's own run meets the same failure and records it.
    }
  }
}

int prebuild_threads(int requested, const DeviceInfo& dev) {
  if (requested >= 0) return requested;
  if (!dev.discrete) return 0;
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(cores - 1, 0, 8);
}

}  // namespace ejk::tuning
