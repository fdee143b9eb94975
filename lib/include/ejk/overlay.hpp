#pragma once
// Configs chosen for the current thread while a scope is alive, ahead of every cache.
#include <map>
#include <string>
#include <string_view>

#include "ejk/config.hpp"
#include "ejk/export.hpp"

namespace ejk {

// Either a map from invocation keys (Executor::key) to configs, or one config for every
// invocation of a kernel. Overlays are thread-local and nest: the innermost overlay that
// names an invocation answers; within one overlay an exact key beats a kernel-wide config.
// Configs are checked against the implementation's space when used (InvalidArgument).
class EJK_API ScopedOverlay {
 public:
  using Map = std::map<std::string, Config, std::less<>>;
  explicit ScopedOverlay(Map by_key);
  ScopedOverlay(std::string kernel, Config config);
  ~ScopedOverlay();
  ScopedOverlay(const ScopedOverlay&) = delete;
  ScopedOverlay& operator=(const ScopedOverlay&) = delete;

  // Innermost overlay of this thread, or nullptr.
  static const ScopedOverlay* innermost();
  const ScopedOverlay* outer() const { return outer_; }
  // This overlay's config for the invocation, or nullptr.
  const Config* find(std::string_view kernel, std::string_view key) const;
  bool kernel_wide() const { return !kernel_.empty(); }

 private:
  Map by_key_;
  std::string kernel_;
  Config kernel_config_;
  const ScopedOverlay* outer_;
};

}  // namespace ejk
