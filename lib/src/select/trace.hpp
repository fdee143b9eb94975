#pragma once
// EJK_TRACE=trace.json: every executor call as a Chrome trace event, openable in Perfetto
// (ui.perfetto.dev) or chrome://tracing: a "complete" event a call, on the calling thread's track,
// named after the kernel, with its signature, device, implementation, the selection's tier,
// origin and reason, the config, and the call's time on the device's own clock. Tracing times
// every call, so calls wait for the device: a trace shows where time goes, not how calls overlap.
//
// The file is a JSON array written an event a line and closed with "]" when the last executor
// tracing into it is destroyed; a process that dies leaves it unclosed, which the viewers accept.
// One process a file: "%p" in the path becomes the process id, so processes can trace side by side.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "ejk/device.hpp"
#include "ejk/invocation.hpp"
#include "ejk/kernel.hpp"
#include "ejk/selection.hpp"

namespace ejk::select {

class Trace {
 public:
  // One trace per path in the process. Throws IoError when the file cannot be created.
  static std::shared_ptr<Trace> open(const std::string& path);
  explicit Trace(const std::filesystem::path& path);
  ~Trace();
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  // A call that began at `start` (steady clock) and took `device_ns` on the device.
  void call(const Invocation& inv, const DeviceInfo& device, const Implementation& impl, const Selection& selection,
            std::chrono::steady_clock::time_point start, double device_ns);

 private:
  struct Close {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::mutex mutex_;
  std::unique_ptr<std::FILE, Close> file_;
  std::filesystem::path path_;
  std::chrono::steady_clock::time_point origin_;
  std::map<std::thread::id, int> threads_;
};

}  // namespace ejk::select
