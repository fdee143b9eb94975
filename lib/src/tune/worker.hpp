#pragma once
// Isolation: candidates run in a worker process (started with posix_spawn, never fork: fork
// after OpenCL or Vulkan initialisation is unsafe) that speaks JSON lines over a socket on its
// standard input and output. A crash or hang kills only the worker, which is started again.
//
// Protocol, one JSON object per line each way:
//   {"op":"setup","device":"cpu","impl":0,"invocation":{...},"settings":{...}}
//        -> {"ok":true,"validated":"reference"}
//   {"op":"measure","config":{...},"best_ns":123.0} -> {"ok":true,"measurement":{...},"validated":"..."}
//   {"op":"rerank","configs":[...],"rounds":7} -> {"ok":true,"samples":[[...],...],"errors":["",...]}
// A request the worker cannot serve gets {"ok":false,"error":"...","kind":"invalid_argument"}.
#include <memory>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "ejk/measurement.hpp"
#include "ejk/tuner.hpp"

namespace ejk::tuning {

class WorkerProcess {
 public:
  explicit WorkerProcess(std::string path);  // starts it; throws DeviceError when it cannot
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  struct Reply {
    std::optional<nlohmann::json> json;  // absent when the worker died or timed out
    Status status = Status::ok;          // timeout, or runtime for a crash
    std::string message;                 // how it died, with the end of its stderr
  };
  // Sends one request and waits up to timeout_s for the reply line. A worker that overruns is
  // killed; after a failed reply the process is gone (running() is false).
  Reply request(const nlohmann::json& message, double timeout_s);
  bool running() const { return pid_ > 0; }

 private:
  void stop(bool kill_now);
  std::string reap_description();

  std::string path_;
  pid_t pid_ = -1;
  int sock_ = -1;  // our end of the protocol socket
  int err_ = -1;   // the worker's stderr
  std::string buffer_;
  std::string err_tail_;
};

// Serves each candidate through a worker, starting (and setting up) a fresh one whenever the
// previous died. Timeouts follow the best time so far.
class IsolatedRunner {
 public:
  IsolatedRunner(std::string worker_path, nlohmann::json setup, const TuneOptions& options);
  ~IsolatedRunner();

  // Starts and sets up the worker now, so that a missing worker or an invocation it cannot
  // serve throws before any candidate runs.
  void start() { ensure(); }
  Measurement measure(const Config& c, double best_ns);
  void rerank(const std::vector<Config>& configs, int rounds, double slowest_ns,
              std::vector<std::vector<double>>& samples, std::vector<std::string>& errors);
  const std::string& validated() const { return validated_; }
  int restarts() const { return restarts_; }

 private:
  void ensure();
  double timeout(double best_ns) const;

  std::string path_;
  nlohmann::json setup_;
  TimingOptions timing_;
  double floor_, factor_;
  std::unique_ptr<WorkerProcess> worker_;
  std::string validated_;
  int starts_ = 0, restarts_ = 0;
};

}  // namespace ejk::tuning
