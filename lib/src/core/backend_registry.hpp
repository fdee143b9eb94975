#pragma once
// The backends compiled in. The registry is core's and each backend registers itself into it
// from its own folder (a static BackendRegistration), so core lists and opens devices
// (core/device.cpp) and names the backends built in (core/version.cpp) without depending on any
// backend: adding one is its folder, its enumerator in ejk/device.hpp and its build option.
#include <memory>
#include <string>
#include <vector>

#include "ejk/device.hpp"
#include "ejk/peer.hpp"

namespace ejk::backends {

// A backend's device-to-device transport between processes (ejk/peer.hpp).
struct PeerHooks {
  PeerTransport (*transport)(Device&) = nullptr;
  PeerGroupKey (*new_key)(Device&) = nullptr;
  std::unique_ptr<PeerGroup> (*open)(Device&, const PeerGroupKey&, int rank, int size) = nullptr;
};

struct BackendEntry {
  Backend backend = Backend::cpu;
  std::vector<DeviceInfo> (*devices)() = nullptr;  // empty when the backend's driver is absent
  std::shared_ptr<Device> (*open)(int index) = nullptr;
  // "auto" takes a discrete device of the highest rank (0: only as the fallback, the CPU).
  int auto_rank = 0;
  // How build_info() names it: "vulkan", "vulkan +coopmat".
  std::string build_name;
  // Its devices are clc::Devices: they run the kernels' OpenCL C (backends/clc/clc_device.hpp).
  bool opencl_c = false;
  const PeerHooks* peer = nullptr;  // null: no transport of its own
};

class BackendRegistration {
 public:
  explicit BackendRegistration(BackendEntry entry);
};

// Every registered backend, in the order of the Backend enumeration.
std::vector<BackendEntry> registered();

}  // namespace ejk::backends
