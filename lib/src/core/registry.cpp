#include "ejk/registry.hpp"

#include <algorithm>

#include "core/embedded.hpp"
#include "core/sha256.hpp"
#include "ejk/error.hpp"

namespace ejk {

Registry& Registry::global() {
  static Registry* r = [] {
    auto* reg = new Registry;  // never destroyed: kernels may run during static destruction
    register_builtin_kernels(*reg);
    return reg;
  }();
  return *r;
}

void Registry::add(std::shared_ptr<const Kernel> kernel) {
  std::lock_guard lock(mutex_);
  std::string name(kernel->name());
  if (kernels_.count(name)) throw InvalidArgument("kernel '" + name + "' registered twice");
  kernels_.emplace(std::move(name), std::move(kernel));
}

void Registry::add(std::shared_ptr<const Implementation> impl) {
  std::lock_guard lock(mutex_);
  auto it = kernels_.find(impl->kernel());
  if (it == kernels_.end())
    throw InvalidArgument("implementation for unknown kernel '" + std::string(impl->kernel()) + "'");
  if (impl->args() != it->second->args())
    throw InvalidArgument("the " + std::string(to_string(impl->backend())) + " implementation of '" +
                          std::string(impl->kernel()) + "' takes different arguments than the kernel");
  auto& list = impls_[std::string(impl->kernel())];
  list.push_back(std::move(impl));
  std::stable_sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a->priority() > b->priority(); });
}

bool Registry::has(std::string_view name) const {
  std::lock_guard lock(mutex_);
  return kernels_.find(name) != kernels_.end();
}

const Kernel& Registry::kernel(std::string_view name) const {
  std::lock_guard lock(mutex_);
  auto it = kernels_.find(name);
  if (it == kernels_.end()) {
    std::string known;
    for (const auto& [k, _] : kernels_) known += (known.empty() ? "" : ", ") + k;
    throw NotFound("unknown kernel '" + std::string(name) + "' (known: " + known + ")");
  }
  return *it->second;
}

std::vector<std::string> Registry::kernels() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> out;
  for (const auto& [k, _] : kernels_) out.push_back(k);
  return out;
}

std::vector<const Implementation*> Registry::implementations(std::string_view kernel) const {
  std::lock_guard lock(mutex_);
  std::vector<const Implementation*> out;
  auto it = impls_.find(kernel);
  if (it != impls_.end())
    for (const auto& i : it->second) out.push_back(i.get());
  return out;
}

const Implementation& Registry::implementation(const Invocation& inv, const DeviceInfo& dev) const {
  for (const Implementation* impl : implementations(inv.kernel))
    if (impl->backend() == dev.backend && impl->supports(inv, dev)) return *impl;
  kernel(inv.kernel);  // throws for unknown kernels
  throw NotFound("kernel '" + inv.kernel + "' has no implementation for " + dev.id() + " (" + dev.name +
                 ") that supports " + inv.signature());
}

std::string Registry::version(const Implementation& impl) const {
  {
    std::lock_guard lock(mutex_);
    if (auto it = versions_.find(&impl); it != versions_.end()) return it->second;
  }
  detail::Sha256 h;
  h.update(kernel(impl.kernel()).host_version()).update("\n");
  for (const auto& key : impl.sources()) {
    h.update(key).update("\n");
    h.update(detail::embedded(key).text());
  }
  std::string v = h.hex().substr(0, 16);
  std::lock_guard lock(mutex_);
  versions_[&impl] = v;
  return v;
}

}  // namespace ejk
