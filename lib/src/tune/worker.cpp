#include "tune/worker.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "core/install_paths.hpp"
#include "ejk/error.hpp"
#include "ejk/registry.hpp"
#include "tune/bench.hpp"

extern char** environ;

namespace ejk {

namespace {

// `err` is errno as saved right after the failing call: anything in between may change errno.
std::string sys_error(const std::string& what, int err) { return what + ": " + std::strerror(err); }

bool write_all(int fd, const std::string& data) {
  std::size_t off = 0;
  while (off < data.size()) {
    // send() on the socket avoids SIGPIPE when the worker is gone.
    ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == ENOTSOCK) n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    off += static_cast<std::size_t>(n);
  }
  return true;
}

std::string exe_dir() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.parent_path().string();
}

}  // namespace

std::string find_worker() {
  std::vector<std::string> tried;
  if (const char* env = std::getenv("EJK_WORKER"); env && *env) {
    if (::access(env, X_OK) == 0) return env;
    tried.push_back(std::string(env) + " ($EJK_WORKER)");
  }
  std::vector<std::string> dirs;
  if (auto d = exe_dir(); !d.empty()) dirs.push_back(d);
  if (auto d = detail::installed_bin_dir(); !d.empty()) dirs.push_back(d.string());
  for (const auto& d : dirs) {
    std::string p = d + "/ejk-worker";
    if (::access(p.c_str(), X_OK) == 0) return p;
    tried.push_back(p);
  }
  std::string list;
  for (const auto& t : tried) list += (list.empty() ? "" : ", ") + t;
  throw NotFound("the tuner's worker executable ejk-worker was not found (looked at " + list +
                 "); set EJK_WORKER to its path");
}

namespace tuning {

// ---------------------------------------------------------------------------------------------
// WorkerProcess

WorkerProcess::WorkerProcess(std::string path) : path_(std::move(path)) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    const int err = errno;
    throw DeviceError(sys_error("socketpair", err));
  }
  int ep[2];
  if (::pipe2(ep, O_CLOEXEC) != 0) {
    const int err = errno;
    ::close(sv[0]);
    ::close(sv[1]);
    throw DeviceError(sys_error("pipe2", err));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 0);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 1);
  posix_spawn_file_actions_adddup2(&fa, ep[1], 2);
  // Default signal dispositions, whatever the parent ignores (SIGPIPE in servers, say).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t all;
  sigfillset(&all);
  posix_spawnattr_setsigdefault(&attr, &all);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);

  std::vector<std::string> env_store;
  for (char** e = environ; e && *e; ++e)
    if (std::strncmp(*e, "EJK_WORKER_SERVE=", 17) != 0) env_store.emplace_back(*e);
  env_store.emplace_back("EJK_WORKER_SERVE=1");
  std::vector<char*> envp;
  for (auto& s : env_store) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string arg0 = path_, arg1 = "--serve";
  char* argv[] = {arg0.data(), arg1.data(), nullptr};

  int rc = ::posix_spawn(&pid_, path_.c_str(), &fa, &attr, argv, envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(sv[1]);
  ::close(ep[1]);
  if (rc != 0) {
    ::close(sv[0]);
    ::close(ep[0]);
    pid_ = -1;
    throw DeviceError("cannot start the tuner's worker " + path_ + ": " + std::strerror(rc));
  }
  sock_ = sv[0];
  err_ = ep[0];
  ::fcntl(err_, F_SETFL, ::fcntl(err_, F_GETFL) | O_NONBLOCK);
}

WorkerProcess::~WorkerProcess() { stop(false); }

void WorkerProcess::stop(bool kill_now) {
  if (pid_ > 0) {
    if (!kill_now) {
      // End of input asks it to exit; one that does not within a second is killed.
      ::shutdown(sock_, SHUT_WR);
      for (int i = 0; i < 100; ++i) {
        int st;
        if (::waitpid(pid_, &st, WNOHANG) == pid_) {
          pid_ = -1;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int st;
      while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
      }
      pid_ = -1;
    }
  }
  if (sock_ >= 0) ::close(sock_);
  if (err_ >= 0) ::close(err_);
  sock_ = err_ = -1;
}

std::string WorkerProcess::reap_description() {
  int st = 0;
  pid_t r;
  while ((r = ::waitpid(pid_, &st, 0)) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  std::string how;
  if (r < 0) how = "worker vanished";
  else if (WIFSIGNALED(st)) how = "worker killed by signal " + std::to_string(WTERMSIG(st)) + " (" + strsignal(WTERMSIG(st)) + ")";
  else if (WIFEXITED(st)) how = "worker exited with status " + std::to_string(WEXITSTATUS(st));
  else how = "worker ended";
  // Drain what it said last: usually the assertion or error that ended it.
  char buf[4096];
  ssize_t n;
  while ((n = ::read(err_, buf, sizeof buf)) > 0) err_tail_.append(buf, static_cast<std::size_t>(n));
  std::string tail = err_tail_.size() > 400 ? err_tail_.substr(err_tail_.size() - 400) : err_tail_;
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  if (!tail.empty()) how += "; its last words: " + tail;
  stop(true);
  return how;
}

WorkerProcess::Reply WorkerProcess::request(const nlohmann::json& message, double timeout_s) {
  Reply reply;
  if (pid_ <= 0) {
    reply.status = Status::runtime;
    reply.message = "worker not running";
    return reply;
  }
  err_tail_.clear();
  if (!write_all(sock_, message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n")) {
    reply.status = Status::runtime;
    reply.message = reap_description();
    return reply;
  }
  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  for (;;) {
    if (auto nl = buffer_.find('\n'); nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      try {
        reply.json = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        stop(true);
        reply.status = Status::runtime;
        reply.message = std::string("worker sent a malformed reply: ") + e.what();
      }
      return reply;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      stop(true);
      reply.status = Status::timeout;
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.3g", timeout_s);
      reply.message = std::string("no answer within ") + buf + " s: worker killed";
      return reply;
    }
    pollfd fds[2] = {{sock_, POLLIN, 0}, {err_, POLLIN, 0}};
    int rc = ::poll(fds, 2, static_cast<int>(std::min<long long>(left, 1000)));
    if (rc < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      throw DeviceError(sys_error("poll on the tuner's worker", err));
    }
    if (fds[1].revents & (POLLIN | POLLHUP)) {
      char buf[4096];
      ssize_t n = ::read(err_, buf, sizeof buf);
      if (n > 0) {
        err_tail_.append(buf, static_cast<std::size_t>(n));
        if (err_tail_.size() > 8192) err_tail_.erase(0, err_tail_.size() - 4096);
      }
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[65536];
      ssize_t n = ::read(sock_, buf, sizeof buf);
      if (n > 0) {
        buffer_.append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        buffer_.clear();
        reply.status = Status::runtime;
        reply.message = reap_description();
        return reply;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// IsolatedRunner

IsolatedRunner::IsolatedRunner(std::string worker_path, nlohmann::json setup, const TuneOptions& options)
    : path_(std::move(worker_path)),
      setup_(std::move(setup)),
      timing_(options.timing),
      floor_(options.timeout_floor_seconds),
      factor_(options.timeout_factor) {}

IsolatedRunner::~IsolatedRunner() = default;

double IsolatedRunner::timeout(double best_ns) const {
  // A candidate may take up to factor x the best time per run (slower ones are abandoned after
  // one sample well before that), plus warm-up and sampling, which are bounded by time.
  return std::max(floor_, factor_ * best_ns * 1e-9) + 2 * timing_.warmup_seconds + 4 * timing_.max_seconds;
}

void IsolatedRunner::ensure() {
  if (worker_ && worker_->running()) return;
  for (int attempt = 0;; ++attempt) {
    worker_ = std::make_unique<WorkerProcess>(path_);
    if (starts_++ > 0) ++restarts_;
    // Setup computes the reference, or runs the trusted config: allow it time.
    auto reply = worker_->request(setup_, std::max(120.0, 4 * floor_));
    if (reply.json) {
      const auto& j = *reply.json;
      if (j.value("ok", false)) {
        validated_ = j.value("validated", "");
        return;
      }
      std::string error = "tuner worker " + path_ + ": " + j.value("error", std::string("setup failed"));
      std::string kind = j.value("kind", "");
      if (kind == "invalid_argument") throw InvalidArgument(error);
      if (kind == "not_found") throw NotFound(error);
      throw DeviceError(error);
    }
    // Died while running the trusted config: go on without it, once.
    auto& settings = setup_["settings"];
    if (attempt == 0 && settings.contains("trusted") && !settings["trusted"].is_null()) {
      settings["trusted"] = nullptr;
      settings["trusted_failed"] = true;
      continue;
    }
    throw DeviceError("tuner worker " + path_ + " failed during setup: " + reply.message);
  }
}

Measurement IsolatedRunner::measure(const Config& c, double best_ns) {
  ensure();
  auto reply = worker_->request({{"op", "measure"}, {"config", c.to_json()}, {"best_ns", best_ns}}, timeout(best_ns));
  if (!reply.json) return failure(c, reply.status, reply.message);
  const auto& j = *reply.json;
  if (!j.value("ok", false)) return failure(c, Status::runtime, j.value("error", std::string("worker error")));
  validated_ = j.value("validated", validated_);
  Measurement m = Measurement::from_json(j.at("measurement"));
  m.config = c;
  return m;
}

void IsolatedRunner::rerank(const std::vector<Config>& configs, int rounds, double slowest_ns,
                            std::vector<std::vector<double>>& samples, std::vector<std::string>& errors) {
  samples.assign(configs.size(), {});
  errors.assign(configs.size(), {});
  ensure();
  nlohmann::json list = nlohmann::json::array();
  for (const auto& c : configs) list.push_back(c.to_json());
  double budget = timeout(slowest_ns * static_cast<double>(configs.size()) * (rounds + 1));
  auto reply = worker_->request({{"op", "rerank"}, {"configs", list}, {"rounds", rounds}}, budget);
  if (!reply.json || !reply.json->value("ok", false)) {
    std::string why = reply.json ? reply.json->value("error", std::string("worker error")) : reply.message;
    for (auto& e : errors) e = why;
    return;
  }
  samples = reply.json->at("samples").get<std::vector<std::vector<double>>>();
  errors = reply.json->at("errors").get<std::vector<std::string>>();
}

}  // namespace tuning

// ---------------------------------------------------------------------------------------------
// The worker's side

namespace {

class LineReader {
 public:
  explicit LineReader(int fd) : fd_(fd) {}
  std::optional<std::string> next() {
    for (;;) {
      if (auto nl = buf_.find('\n'); nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      char tmp[65536];
      ssize_t n = ::read(fd_, tmp, sizeof tmp);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return std::nullopt;
      buf_.append(tmp, static_cast<std::size_t>(n));
    }
  }

 private:
  int fd_;
  std::string buf_;
};

std::string kind_of(const std::exception& e) {
  if (dynamic_cast<const InvalidArgument*>(&e)) return "invalid_argument";
  if (dynamic_cast<const NotFound*>(&e)) return "not_found";
  return "error";
}

}  // namespace

int worker_main() {
  // The protocol owns the original stdout; anything a kernel or driver prints goes to stderr.
  int out = ::dup(1);
  if (out < 0) return 70;
  ::dup2(2, 1);
  LineReader in(0);
  std::shared_ptr<Device> device;
  std::unique_ptr<tuning::Bench> bench;
  while (auto line = in.next()) {
    if (line->empty()) continue;
    nlohmann::json reply;
    try {
      auto req = nlohmann::json::parse(*line);
      std::string op = req.at("op").get<std::string>();
      if (op == "setup") {
        bench.reset();
        device = open_device(req.at("device").get<std::string>());
        Invocation inv = Invocation::from_json(req.at("invocation"));
        auto impls = Registry::global().implementations(inv.kernel);
        auto idx = req.at("impl").get<std::size_t>();
        if (idx >= impls.size())
          throw NotFound("implementation " + std::to_string(idx) + " of " + inv.kernel + " is not registered in " +
                         "this worker");
        auto settings = tuning::BenchSettings::from_json(req.at("settings"));
        bench = std::make_unique<tuning::Bench>(inv, *impls[idx], *device, settings);
        bench->prepare();
        reply = {{"ok", true}, {"validated", bench->validated()}};
      } else if (op == "measure") {
        if (!bench) throw InvalidArgument("measure before setup");
        Measurement m = bench->measure(Config::from_json(req.at("config")), req.value("best_ns", 0.0));
        reply = {{"ok", true}, {"measurement", m.to_json()}, {"validated", bench->validated()}};
      } else if (op == "rerank") {
        if (!bench) throw InvalidArgument("rerank before setup");
        std::vector<Config> configs;
        for (const auto& c : req.at("configs")) configs.push_back(Config::from_json(c));
        std::vector<std::vector<double>> samples;
        std::vector<std::string> errors;
        bench->rerank(configs, req.at("rounds").get<int>(), samples, errors);
        reply = {{"ok", true}, {"samples", samples}, {"errors", errors}};
      } else if (op == "quit") {
        break;
      } else {
        throw InvalidArgument("unknown worker request '" + op + "'");
      }
    } catch (const std::exception& e) {
      reply = {{"ok", false}, {"error", e.what()}, {"kind", kind_of(e)}};
    }
    if (!write_all(out, reply.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n")) return 1;
  }
  return 0;
}

}  // namespace ejk
