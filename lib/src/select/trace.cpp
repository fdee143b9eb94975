#include "select/trace.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "ejk/error.hpp"
#include "select/per_path.hpp"

namespace ejk::select {
namespace {

std::string expand(std::string path) {
  for (std::size_t at; (at = path.find("%p")) != std::string::npos;) path.replace(at, 2, std::to_string(::getpid()));
  return path;
}

}  // namespace

std::shared_ptr<Trace> Trace::open(const std::string& path) { return one_per_path<Trace>(expand(path)); }

Trace::Trace(const std::filesystem::path& path)
    : file_(std::fopen(path.c_str(), "w")), path_(path), origin_(std::chrono::steady_clock::now()) {
  if (!file_) {
    const int err = errno;
    throw IoError("EJK_TRACE: cannot create " + path.string() + ": " + std::strerror(err));
  }
  const nlohmann::json name = {{"ph", "M"},
                               {"name", "process_name"},
                               {"pid", ::getpid()},
                               {"tid", 0},
                               {"args", {{"name", "ejk (pid " + std::to_string(::getpid()) + ")"}}}};
  std::fprintf(file_.get(), "[\n%s\n", name.dump().c_str());
  std::fflush(file_.get());
}

Trace::~Trace() { std::fputs("]\n", file_.get()); }

void Trace::call(const Invocation& inv, const DeviceInfo& device, const Implementation& impl,
                 const Selection& selection, std::chrono::steady_clock::time_point start, double device_ns) {
  using us = std::chrono::duration<double, std::micro>;
  const auto end = std::chrono::steady_clock::now();
  std::lock_guard lock(mutex_);
  const int tid = threads_.try_emplace(std::this_thread::get_id(), static_cast<int>(threads_.size()) + 1).first->second;
  const auto sources = impl.sources();
  const nlohmann::json event = {
      {"ph", "X"},
      {"name", inv.kernel},
      {"cat", std::string(to_string(impl.backend()))},
      {"pid", ::getpid()},
      {"tid", tid},
      {"ts", us(start - origin_).count()},
      {"dur", us(end - start).count()},
      {"args",
       {{"signature", inv.signature()},
        {"device", device.id()},
        {"implementation", std::string(to_string(impl.backend())) + (sources.empty() ? "" : " " + sources.front())},
        {"tier", std::string(to_string(selection.tier))},
        {"origin", std::string(to_string(selection.origin))},
        {"reason", selection.reason},
        {"config", selection.config.canonical()},
        {"device_us", device_ns / 1e3}}}};
  // A line an event, each flushed: what was traced survives a crash.
  if (std::fprintf(file_.get(), ",%s\n", event.dump().c_str()) < 0 || std::fflush(file_.get()) != 0)
    throw IoError("EJK_TRACE: writing " + path_.string() + " failed");
}

}  // namespace ejk::select
