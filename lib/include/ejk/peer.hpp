#pragma once
// Device memory moved between the devices of cooperating processes (ranks) without the host:
// point-to-point sends and receives, ordered after the work already submitted to the device and
// run on a queue of their own, so that they overlap the work submitted next. The CUDA backend
// moves it with NCCL (libnccl.so.2, loaded at run time: $EJK_NCCL, the loader's path, then
// NVIDIA's nvidia-nccl wheel in the usual Python folders), or where NCCL is absent by CUDA IPC
// between the processes of one host ($EJK_CUDA_PEER=nccl or ipc insists on one); other backends
// have no transport (ring attention stages their blocks through host memory). The group is set up by its users'
// own control plane (MPI in libejk_mpi): one rank makes a key, every rank opens the group with it.
#include <array>
#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "ejk/device.hpp"
#include "ejk/export.hpp"

namespace ejk {

// What rank 0 hands every other rank to open the same group (NCCL's unique id).
struct PeerGroupKey {
  std::array<std::byte, 128> bytes{};
};

// Whether a device can join a group, and which physical device it is.
struct PeerTransport {
  std::string absent;    // why it cannot ("" when it can)
  std::string name;      // "nccl 2.27.5"
  std::string identity;  // the physical device (host and PCI address): ranks of one group need distinct ones
  std::string domain;    // ranks of one group need the same: "nccl", "cuda ipc on HOST"
};

class EJK_API PeerGroup {
 public:
  virtual ~PeerGroup() = default;
  // One buffer's first `bytes` to rank `to`, or into it from rank `from`.
  struct Move {
    const Buffer* send = nullptr;
    Buffer* recv = nullptr;
    std::size_t bytes = 0;
    int peer = 0;
  };
  // Queues the moves as one exchange (every send and receive of it in flight together, so a ring
  // of sends cannot deadlock), after all work submitted to the device so far; returns at once.
  // Buffers must stay alive, and unwritten by later work, until a join() has been submitted
  // after it and that work is ordered after the join.
  virtual void exchange(std::span<const Move> moves) = 0;
  // Work submitted to the device after this call runs after every exchange queued before it.
  virtual void join() = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
};

EJK_API PeerTransport peer_transport(Device& device);
// A fresh key; throws DeviceError when peer_transport(device).absent is not empty.
EJK_API PeerGroupKey new_peer_group_key(Device& device);
// Collective over the `size` ranks that hold the key: each opens the group with its own rank.
EJK_API std::unique_ptr<PeerGroup> open_peer_group(Device& device, const PeerGroupKey& key, int rank, int size);

}  // namespace ejk
