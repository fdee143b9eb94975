#pragma once
// The CUDA backend's transports between processes (ejk/peer.hpp): NCCL (nccl.cpp) and CUDA IPC
// within one host (ipc.cpp); transports.cpp registers the one a process uses.
#include <string>

#include "core/backend_registry.hpp"

namespace ejk::cuda {

class CudaDevice;

extern const backends::PeerHooks nccl_hooks, ipc_hooks;
// What the CUDA backend registers: NCCL where it loads, CUDA IPC otherwise, or the one
// $EJK_CUDA_PEER (nccl, ipc) names.
extern const backends::PeerHooks peer_hooks;

// This host's name and the device's PCI address: what tells two ranks' devices apart.
std::string host_name();
std::string device_identity(CudaDevice& dev);

}  // namespace ejk::cuda
