#pragma once
// (kernel, backend) -> implementations with priorities.
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "ejk/export.hpp"
#include "ejk/kernel.hpp"

namespace ejk {

class EJK_API Registry {
 public:
  // The registry with every built-in kernel.
  static Registry& global();

  void add(std::shared_ptr<const Kernel> kernel);
  // Throws InvalidArgument when the kernel is unknown or the argument lists differ.
  void add(std::shared_ptr<const Implementation> impl);

  const Kernel& kernel(std::string_view name) const;  // throws NotFound listing known kernels
  bool has(std::string_view name) const;
  std::vector<std::string> kernels() const;
  std::vector<const Implementation*> implementations(std::string_view kernel) const;
  // Highest-priority implementation for the device's backend that supports the invocation.
  const Implementation& implementation(const Invocation& inv, const DeviceInfo& dev) const;
  // Hash of the kernel's host version and the implementation's device sources.
  std::string version(const Implementation& impl) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const Kernel>, std::less<>> kernels_;
  std::map<std::string, std::vector<std::shared_ptr<const Implementation>>, std::less<>> impls_;
  mutable std::map<const Implementation*, std::string> versions_;
};

// Registers every kernel in kernels/: what each folder's files register (kernels/common/builtin.hpp).
EJK_API void register_builtin_kernels(Registry& registry);

}  // namespace ejk
