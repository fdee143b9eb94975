#pragma once
// One object per file path in the process (EJK_RECORD's recorder, EJK_TRACE's trace): every
// executor given the same path shares it, and it lives while any of them does.
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace ejk::select {

// The live T for `path`, else a new T(path).
template <class T>
std::shared_ptr<T> one_per_path(const std::filesystem::path& path) {
  static std::mutex mutex;
  static auto* live = new std::map<std::string, std::weak_ptr<T>>;  // never destroyed: used until exit
  std::lock_guard lock(mutex);
  auto& slot = (*live)[std::filesystem::absolute(path).string()];
  if (auto t = slot.lock()) return t;
  auto t = std::make_shared<T>(path);
  slot = t;
  return t;
}

}  // namespace ejk::select
