// ejk/peer.hpp: each backend's transport, found through the backend registry.
#include "ejk/peer.hpp"

#include "core/backend_registry.hpp"
#include "ejk/error.hpp"

namespace ejk {
namespace {

const backends::PeerHooks* hooks(const Device& device) {
  for (const auto& b : backends::registered())
    if (b.backend == device.info().backend) return b.peer;
  return nullptr;
}

const backends::PeerHooks& usable(Device& device) {
  const backends::PeerHooks* h = hooks(device);
  if (!h) throw DeviceError(device.info().id() + " has no device-to-device transport between processes");
  if (std::string why = h->transport(device).absent; !why.empty()) throw DeviceError(device.info().id() + ": " + why);
  return *h;
}

}  // namespace

PeerTransport peer_transport(Device& device) {
  const backends::PeerHooks* h = hooks(device);
  if (!h) return {"the " + std::string(to_string(device.info().backend)) + " backend moves no memory between processes", "", ""};
  return h->transport(device);
}

PeerGroupKey new_peer_group_key(Device& device) { return usable(device).new_key(device); }

std::unique_ptr<PeerGroup> open_peer_group(Device& device, const PeerGroupKey& key, int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size)
    throw InvalidArgument("open_peer_group: rank " + std::to_string(rank) + " of " + std::to_string(size) + " is out of range");
  return usable(device).open(device, key, rank, size);
}

}  // namespace ejk
