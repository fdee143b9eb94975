#pragma once
// A fixed pool of worker threads, one per hardware thread, running index ranges in parallel.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ejk::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(unsigned threads = std::thread::hardware_concurrency());
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  unsigned size() const { return static_cast<unsigned>(workers_.size()) + 1; }
  // Calls fn(i) for every i in [0, n), spread over the pool and the calling thread; returns
  // when all are done. The first exception thrown by fn is rethrown here.
  void parallel_for(std::int64_t n, const std::function<void(std::int64_t)>& fn);

 private:
  void work();
  void drain();
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(std::int64_t)>* fn_ = nullptr;
  std::int64_t n_ = 0, next_ = 0, finished_ = 0;
  std::uint64_t generation_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
  std::mutex call_mutex_;  // one parallel_for at a time
};

}  // namespace ejk::cpu
