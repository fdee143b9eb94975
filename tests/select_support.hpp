#pragma once
// A tiny "probe" kernel with a no-op implementation, a fake device with a chosen identity and
// child processes: what the selector and cache tests are built on (with support.hpp).
#include <spawn.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ejk/ejk.hpp"
#include "support.hpp"

extern char** environ;

namespace ejk::test {

// probe: one inout vector x[n]; options may hold "mode". Implementation space:
// tile in {1..32} with tile <= n, unroll in {1, 2}. The heuristic is tile 4, unroll 1.
class ProbeKernel final : public Kernel {
 public:
  explicit ProbeKernel(std::string host_version = "probe/1") : host_version_(std::move(host_version)) {}
  std::string_view name() const override { return "probe"; }
  std::string_view host_version() const override { return host_version_; }
  std::vector<ArgDef> args() const override { return {{"x", Role::inout}}; }
  void check(const Invocation& inv) const override {
    if (inv.args.size() != 1) throw InvalidArgument("probe takes 1 argument, got " + std::to_string(inv.args.size()));
    if (inv.args[0].shape.size() != 1) throw InvalidArgument("probe: x " + to_string(inv.args[0].shape) + " must have rank 1");
  }
  Vars vars(const Invocation& inv) const override { return {{"n", inv.args.at(0).shape.at(0)}}; }
  double flops(const Invocation& inv) const override { return static_cast<double>(inv.args.at(0).shape.at(0)); }
  double bytes(const Invocation& inv) const override { return flops(inv) * 4; }
  HostArrays reference(const Invocation&, const HostArrays& args) const override { return {args.at(0)}; }

 private:
  std::string host_version_;
};

class ProbeImpl final : public Implementation {
 public:
  explicit ProbeImpl(std::vector<std::string> sources = {}) : sources_(std::move(sources)) {}
  std::string_view kernel() const override { return "probe"; }
  Backend backend() const override { return Backend::cpu; }
  std::vector<ArgDef> args() const override { return {{"x", Role::inout}}; }
  std::vector<std::string> sources() const override { return sources_; }
  ParamSpace space(const Invocation& inv, const DeviceInfo&) const override {
    ParamSpace s;
    s.param("tile", {1, 2, 4, 8, 16, 32}).param("unroll", {1, 2}).constraint("tile <= n");
    s.bind({{"n", inv.args.at(0).shape.at(0)}});
    return s;
  }
  Config heuristic(const Invocation&, const DeviceInfo&) const override { return {{"tile", 4}, {"unroll", 1}}; }
  void run(const Invocation&, const Config&, std::span<const Tensor>, Device&) const override {
    runs.fetch_add(1, std::memory_order_relaxed);
  }
  mutable std::atomic<long> runs{0};

 private:
  std::vector<std::string> sources_;
};

inline std::unique_ptr<Registry> probe_registry(std::string host_version = "probe/1",
                                                std::vector<std::string> sources = {}) {
  auto r = std::make_unique<Registry>();
  r->add(std::make_shared<ProbeKernel>(std::move(host_version)));
  r->add(std::make_shared<ProbeImpl>(std::move(sources)));
  return r;
}

inline Invocation probe(std::int64_t n, DType dtype = DType::f32, nlohmann::json options = nlohmann::json::object()) {
  Invocation inv;
  inv.kernel = "probe";
  inv.args = {{{n}, dtype}};
  inv.options = std::move(options);
  inv.scalars = {{"alpha", 1.5}};
  return inv;
}

inline Config cfg(std::int64_t tile, std::int64_t unroll) { return {{"tile", tile}, {"unroll", unroll}}; }

// A device whose buffers hold nothing, timed by the host's clock; tests derive from it to time
// otherwise.
class FakeDevice : public Device {
 public:
  explicit FakeDevice(DeviceInfo info) : info_(std::move(info)) {}
  const DeviceInfo& info() const override { return info_; }
  std::shared_ptr<Buffer> allocate(std::size_t bytes) override { return std::make_shared<Buffer>(bytes); }
  void write(Buffer&, std::size_t, const void*, std::size_t) override {}
  void read(const Buffer&, std::size_t, void*, std::size_t) override {}
  using Device::copy;
  void copy(const Buffer&, std::size_t, Buffer&, std::size_t, std::size_t) override {}
  void synchronize() override {}
  double time_ns(const std::function<void()>& work) override {
    auto t0 = std::chrono::steady_clock::now();
    work();
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  }

 private:
  DeviceInfo info_;
};

inline DeviceInfo fake_info(std::string name = "Probe One", std::string driver = "1.0",
                            std::string architecture = "acme-gen1", std::string vendor = "Acme") {
  DeviceInfo d;
  d.backend = Backend::cpu;
  d.vendor = std::move(vendor);
  d.name = std::move(name);
  d.driver = std::move(driver);
  d.architecture = std::move(architecture);
  d.compute_units = 1;
  d.max_workgroup_size = 1;
  return d;
}

inline std::shared_ptr<Device> fake_device(DeviceInfo info = fake_info()) {
  return std::make_shared<FakeDevice>(std::move(info));
}

// A measured cache entry for `key` parts, as a tuner would produce it.
inline CacheEntry measured(const std::string& fingerprint, const std::string& kernel, const std::string& version,
                           const std::string& signature, Config config, double median_ns = 1000) {
  CacheEntry e;
  e.fingerprint = fingerprint;
  e.kernel = kernel;
  e.version = version;
  e.signature = signature;
  e.config = std::move(config);
  e.stats = {median_ns, median_ns / 20, median_ns * 0.9, 15};
  e.provenance = {"0.1.0", "anneal", "testhost", 1795305600, 41, 7};  // 2026-11-22
  return e;
}

inline Measurement meas(Config config, Status status, Stats stats = {}, std::string message = "") {
  Measurement m;
  m.config = std::move(config);
  m.status = status;
  m.stats = stats;
  m.message = std::move(message);
  return m;
}

// A child process running `argv`; its stdout is readable from `out` when captured.
struct Child {
  pid_t pid = -1;
  int out = -1;
};

inline Child spawn(const std::vector<std::string>& args, bool capture_stdout = false) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  int fds[2] = {-1, -1};
  if (capture_stdout) {
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    posix_spawn_file_actions_addclose(&actions, fds[1]);
  }
  Child c;
  int rc = posix_spawn(&c.pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (capture_stdout) {
    ::close(fds[1]);
    c.out = fds[0];
  }
  if (rc != 0) throw std::runtime_error("posix_spawn " + args[0] + " failed: " + std::to_string(rc));
  return c;
}

// Exit status, or 128 + signal.
inline int wait_for(Child& c) {
  int status = 0;
  ::waitpid(c.pid, &status, 0);
  if (c.out >= 0) ::close(c.out);
  c.out = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

#ifdef EJK_TEST_HELPER
inline std::string helper_path() { return EJK_TEST_HELPER; }
#endif

// Every row of a cache's devices, entries and measurements tables as text, read behind the
// library's back: equal before and after means a command left the cache untouched.
inline std::string dump_tables(const std::filesystem::path& db) {
  sqlite3* h = nullptr;
  if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(h);
    return "cannot open " + db.string();
  }
  std::string out;
  for (const char* table : {"devices", "entries", "measurements"}) {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(h, (std::string("SELECT * FROM ") + table + " ORDER BY 1").c_str(), -1, &s, nullptr) !=
        SQLITE_OK) {
      out += std::string("no table ") + table + "\n";
      continue;
    }
    out += std::string(table) + ":\n";
    while (sqlite3_step(s) == SQLITE_ROW) {
      for (int c = 0; c < sqlite3_column_count(s); ++c) {
        const unsigned char* t = sqlite3_column_text(s, c);
        out += (t ? reinterpret_cast<const char*>(t) : "NULL") + std::string("|");
      }
      out += "\n";
    }
    sqlite3_finalize(s);
  }
  sqlite3_close(h);
  return out;
}

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace ejk::test
