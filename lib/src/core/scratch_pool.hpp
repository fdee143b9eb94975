#pragma once
// Released scratch buffers by size, for a device whose kernels run in submission order on one
// queue: a buffer one run released is free for the next run's launches, so a run neither
// allocates (drivers that back a buffer on its first use make that a slow launch inside the
// timed span) nor waits for the device to free.
#include <algorithm>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "ejk/device.hpp"

namespace ejk {

class ScratchPool : public std::enable_shared_from_this<ScratchPool> {
 public:
  static constexpr std::size_t keep_bytes = std::size_t{1} << 30;  // released beyond this are freed

  // At least `bytes`: the smallest released buffer that holds them without wasting more than
  // half, else allocate(bytes); back in the pool when its last holder lets go.
  std::shared_ptr<Buffer> take(std::size_t bytes, const std::function<std::shared_ptr<Buffer>(std::size_t)>& allocate) {
    std::shared_ptr<Buffer> b;
    {
      std::lock_guard lock(mutex_);
      auto it = free_.lower_bound(bytes);
      if (it != free_.end() && it->first <= 2 * std::max<std::size_t>(bytes, 4096)) {
        b = std::move(it->second);
        cached_ -= it->first;
        free_.erase(it);
      }
    }
    if (!b) b = allocate(bytes);
    Buffer* const raw = b.get();
    return std::shared_ptr<Buffer>(raw, [pool = shared_from_this(), b = std::move(b)](Buffer*) mutable {
      std::lock_guard lock(pool->mutex_);
      if (pool->cached_ + b->bytes() > keep_bytes) return;  // freed with the deleter
      pool->cached_ += b->bytes();
      pool->free_.emplace(b->bytes(), std::move(b));
    });
  }

 private:
  std::mutex mutex_;
  std::multimap<std::size_t, std::shared_ptr<Buffer>> free_;
  std::size_t cached_ = 0;
};

}  // namespace ejk
