#include "ejk/overlay.hpp"

namespace ejk {

namespace {
thread_local const ScopedOverlay* innermost_overlay = nullptr;
}  // namespace

ScopedOverlay::ScopedOverlay(Map by_key) : by_key_(std::move(by_key)), outer_(innermost_overlay) {
  innermost_overlay = this;
}

ScopedOverlay::ScopedOverlay(std::string kernel, Config config)
    : kernel_(std::move(kernel)), kernel_config_(std::move(config)), outer_(innermost_overlay) {
  innermost_overlay = this;
}

ScopedOverlay::~ScopedOverlay() {
  // Scopes end in reverse order on their thread; the unlink below also copes with an
  // overlay held in an object that outlived an inner one.
  if (innermost_overlay == this) {
    innermost_overlay = outer_;
    return;
  }
  for (const ScopedOverlay* o = innermost_overlay; o; o = o->outer_)
    if (o->outer_ == this) {
      const_cast<ScopedOverlay*>(o)->outer_ = outer_;
      return;
    }
}

const ScopedOverlay* ScopedOverlay::innermost() { return innermost_overlay; }

const Config* ScopedOverlay::find(std::string_view kernel, std::string_view key) const {
  if (!by_key_.empty()) {
    auto it = by_key_.find(key);
    if (it != by_key_.end()) return &it->second;
  }
  if (!kernel_.empty() && kernel_ == kernel) return &kernel_config_;
  return nullptr;
}

}  // namespace ejk
