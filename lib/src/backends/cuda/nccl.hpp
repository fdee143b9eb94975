#pragma once
// The CUDA backend's transport between processes (ejk/peer.hpp), through NCCL (nccl.cpp).
#include "core/backend_registry.hpp"

namespace ejk::cuda {
extern const backends::PeerHooks nccl_hooks;
}
