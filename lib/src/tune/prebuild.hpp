#pragma once
// Builds upcoming candidates' programs on host threads (Implementation::prepare) while the
// device times others: a tune's compile time then overlaps its measuring instead of adding
// to it. Only a head start: a failed build is ignored here and met again, and recorded, when
// the candidate runs.
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "ejk/kernel.hpp"

namespace ejk::tuning {

class Prebuilder {
 public:
  Prebuilder(const Invocation& inv, const Implementation& impl, Device& device, int threads);
  // Drops what is still queued and waits for the builds in progress.
  ~Prebuilder();
  Prebuilder(const Prebuilder&) = delete;
  Prebuilder& operator=(const Prebuilder&) = delete;

  // The configs expected next, most likely first; replaces what is queued.
  void plan(const std::vector<Config>& configs);
  // Builds started so far (finished or not), for tests.
  std::size_t started() const;

 private:
  void work(const std::stop_token& stop);

  const Invocation& inv_;
  const Implementation& impl_;
  Device& device_;
  mutable std::mutex mutex_;
  std::condition_variable_any ready_;
  std::deque<Config> queue_;
  std::size_t started_ = 0;
  std::vector<std::jthread> threads_;
};

// The threads a tune builds ahead with: `requested` when >= 0, else up to 8 on a discrete GPU
// and none elsewhere.
int prebuild_threads(int requested, const DeviceInfo& dev);

}  // namespace ejk::tuning
