// Which transport the CUDA backend's peer groups use (ejk/peer.hpp), and the identity of a device
// that both report.
#include "backends/cuda/transports.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "backends/cuda/cuda_device.hpp"
#include "ejk/error.hpp"
#include "ejk/peer.hpp"

namespace ejk::cuda {
namespace {

// NCCL where it loads: it crosses hosts and picks NVLink, PCIe or the network by itself. CUDA IPC
// otherwise, which reaches the devices of one host. Null, with `absent` saying why, when
// $EJK_CUDA_PEER names neither.
const backends::PeerHooks* pick(Device& device, std::string& absent) {
  const char* env = std::getenv("EJK_CUDA_PEER");
  const std::string_view want = env ? env : "";
  if (want == "nccl") return &nccl_hooks;
  if (want == "ipc") return &ipc_hooks;
  if (!want.empty() && want != "auto") {
    absent = "EJK_CUDA_PEER is '" + std::string(want) + "'; it takes nccl, ipc or auto";
    return nullptr;
  }
  return nccl_hooks.transport(device).absent.empty() ? &nccl_hooks : &ipc_hooks;
}

const backends::PeerHooks& usable(Device& device) {
  std::string absent;
  const backends::PeerHooks* h = pick(device, absent);
  if (!h) throw DeviceError(absent);
  return *h;
}

PeerTransport transport(Device& device) {
  std::string absent;
  const backends::PeerHooks* h = pick(device, absent);
  return h ? h->transport(device) : PeerTransport{absent, "", "", ""};
}

PeerGroupKey new_key(Device& device) { return usable(device).new_key(device); }

std::unique_ptr<PeerGroup> open(Device& device, const PeerGroupKey& key, int rank, int size) {
  return usable(device).open(device, key, rank, size);
}

}  // namespace

const backends::PeerHooks peer_hooks{&transport, &new_key, &open};

std::string host_name() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

std::string device_identity(CudaDevice& dev) {
  const Driver& d = *driver();
  int domain = 0, bus = 0, slot = 0;
  check(d.cuDeviceGetAttribute(&domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, dev.handle()), "cuDeviceGetAttribute");
  check(d.cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev.handle()), "cuDeviceGetAttribute");
  check(d.cuDeviceGetAttribute(&slot, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, dev.handle()), "cuDeviceGetAttribute");
  char text[32];
  std::snprintf(text, sizeof text, "%04x:%02x:%02x", domain, bus, slot);
  return host_name() + "/" + text;
}

}  // namespace ejk::cuda
