#include "ejk/device.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

#include <nlohmann/json.hpp>

#include "core/backend_registry.hpp"
#include "core/static_list.hpp"
#include "ejk/error.hpp"

namespace ejk {

std::string_view to_string(Backend b) {
  switch (b) {
    case Backend::cpu: return "cpu";
    case Backend::opencl: return "opencl";
    case Backend::vulkan: return "vulkan";
    case Backend::cuda: return "cuda";
  }
  return "?";
}

Backend parse_backend(std::string_view name) {
  for (Backend b : {Backend::cpu, Backend::opencl, Backend::vulkan, Backend::cuda})
    if (to_string(b) == name) return b;
  throw InvalidArgument("unknown backend '" + std::string(name) + "' (expected cpu, opencl, vulkan or cuda)");
}

void Device::read_ranges(std::span<const ReadRange> ranges) {
  for (const ReadRange& r : ranges)
    if (r.bytes) read(*r.src, r.offset, r.dst, r.bytes);
}

namespace {

// Ordinary memory: what allocate_host gives where the backend has nothing pinned.
class PlainHostBuffer final : public HostBuffer {
 public:
  explicit PlainHostBuffer(std::size_t bytes) : PlainHostBuffer(std::make_unique<std::byte[]>(std::max<std::size_t>(bytes, 1)), bytes) {}

 private:
  PlainHostBuffer(std::unique_ptr<std::byte[]> memory, std::size_t bytes)
      : HostBuffer(memory.get(), bytes, false), memory_(std::move(memory)) {}
  std::unique_ptr<std::byte[]> memory_;
};

void check_host_copy(const char* what, std::size_t host_bytes, std::size_t host_offset, const Buffer& b,
                     std::size_t offset, std::size_t bytes) {
  auto inside = [&](std::size_t size, std::size_t at) { return at <= size && bytes <= size - at; };
  if (!inside(host_bytes, host_offset) || !inside(b.bytes(), offset))
    throw InvalidArgument(std::string(what) + " of " + std::to_string(bytes) + " bytes at host offset " +
                          std::to_string(host_offset) + " of " + std::to_string(host_bytes) + " and device offset " +
                          std::to_string(offset) + " of " + std::to_string(b.bytes()) + ": past the end");
}

}  // namespace

std::shared_ptr<HostBuffer> Device::allocate_host(std::size_t bytes) { return std::make_shared<PlainHostBuffer>(bytes); }

FencePtr Device::upload(const HostBuffer& src, std::size_t src_offset, Buffer& dst, std::size_t dst_offset,
                        std::size_t bytes, const FencePtr& after) {
  check_host_copy("upload", src.bytes(), src_offset, dst, dst_offset, bytes);
  return queue_upload(src, src_offset, dst, dst_offset, bytes, after);
}

FencePtr Device::download(const Buffer& src, std::size_t src_offset, HostBuffer& dst, std::size_t dst_offset,
                          std::size_t bytes, const FencePtr& after) {
  check_host_copy("download", dst.bytes(), dst_offset, src, src_offset, bytes);
  return queue_download(src, src_offset, dst, dst_offset, bytes, after);
}

FencePtr Device::queue_upload(const HostBuffer& src, std::size_t src_offset, Buffer& dst, std::size_t dst_offset,
                              std::size_t bytes, const FencePtr& after) {
  if (after) after->wait();
  if (bytes) write(dst, dst_offset, src.data() + src_offset, bytes);
  return nullptr;
}

FencePtr Device::queue_download(const Buffer& src, std::size_t src_offset, HostBuffer& dst, std::size_t dst_offset,
                                std::size_t bytes, const FencePtr& after) {
  if (after) after->wait();
  if (bytes) read(src, src_offset, dst.data() + dst_offset, bytes);
  return nullptr;
}

std::vector<PassTime> Device::time_passes(const std::function<void()>& work) { return {{"(all)", time_ns(work)}}; }

void Device::order_after(const FencePtr& fence) {
  if (fence) fence->wait();
}

void Device::check_copy(const Buffer& src, std::size_t src_offset, const Buffer& dst, std::size_t dst_offset,
                        std::size_t bytes) {
  auto inside = [&](const Buffer& b, std::size_t offset) { return offset <= b.bytes() && bytes <= b.bytes() - offset; };
  if (!inside(src, src_offset) || !inside(dst, dst_offset))
    throw InvalidArgument("copy of " + std::to_string(bytes) + " bytes from offset " + std::to_string(src_offset) +
                          " of a buffer of " + std::to_string(src.bytes()) + " to offset " + std::to_string(dst_offset) +
                          " of a buffer of " + std::to_string(dst.bytes()) + " bytes: past the end");
}

std::string DeviceInfo::id() const {
  return backend == Backend::cpu ? std::string("cpu") : std::string(to_string(backend)) + ":" + std::to_string(index);
}

bool DeviceInfo::offers(const CoopMatShape& shape) const {
  return std::any_of(coopmat.begin(), coopmat.end(), [&](const CoopMatShape& c) {
    return c.m == shape.m && c.n == shape.n && c.k == shape.k && c.a == shape.a && c.c == shape.c;
  });
}

std::string DeviceInfo::fingerprint() const {
  return std::string(to_string(backend)) + "|" + vendor + "|" + name + "|" + driver;
}

nlohmann::json DeviceInfo::to_json() const {
  nlohmann::json coop = nlohmann::json::array();
  for (const auto& c : coopmat)
    coop.push_back({{"m", c.m}, {"n", c.n}, {"k", c.k}, {"a", to_string(c.a)}, {"c", to_string(c.c)}});
  return {{"id", id()},
          {"backend", to_string(backend)},
          {"vendor", vendor},
          {"name", name},
          {"driver", driver},
          {"api_version", api_version},
          {"architecture", architecture},
          {"discrete", discrete},
          {"cpu", cpu},
          {"compute_units", compute_units},
          {"global_mem", global_mem},
          {"max_buffer", max_buffer},
          {"local_mem", local_mem},
          {"static_local_mem", static_local()},
          {"max_workgroup_size", max_workgroup_size},
          {"max_workgroup_dims", max_workgroup_dims},
          {"subgroup_size", subgroup_size},
          {"fp16", fp16},
          {"bf16", bf16},
          {"subgroups", subgroups},
          {"coopmat", coop},
          {"fingerprint", fingerprint()}};
}

namespace backends {

BackendRegistration::BackendRegistration(BackendEntry entry) { static_list<BackendEntry>().push_back(std::move(entry)); }

std::vector<BackendEntry> registered() {
  std::vector<BackendEntry> list = static_list<BackendEntry>();
  std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.backend < b.backend; });
  return list;
}

}  // namespace backends

namespace {

const std::vector<DeviceInfo>& all_devices() {
  static const std::vector<DeviceInfo> devices = [] {
    std::vector<DeviceInfo> out;
    for (const auto& b : backends::registered())
      for (auto& d : b.devices()) out.push_back(std::move(d));
    return out;
  }();
  return devices;
}

std::shared_ptr<Device> open_info(const DeviceInfo& info) {
  for (const auto& b : backends::registered())
    if (b.backend == info.backend) return b.open(info.index);
  throw InvalidArgument("backend " + std::string(to_string(info.backend)) + " is not compiled in");
}

}  // namespace

std::vector<DeviceInfo> list_devices() { return all_devices(); }

std::string default_device_name() {
  const char* env = std::getenv("EJK_DEVICE");
  return env && *env ? env : "auto";
}

std::shared_ptr<Device> open_device(std::string_view name) {
  const auto& devices = all_devices();
  const DeviceInfo* chosen = nullptr;
  if (name == "auto") {
    // A discrete device of the highest-ranked backend (Vulkan before OpenCL: it reaches the
    // tensor cores), else the first device, the CPU.
    int rank = 0;
    for (const auto& b : backends::registered())
      for (const auto& d : devices)
        if (d.backend == b.backend && d.discrete && b.auto_rank > rank) {
          chosen = &d;
          rank = b.auto_rank;
          break;
        }
    if (!chosen) chosen = &devices.front();
  } else {
    for (const auto& d : devices)
      if (d.id() == name || (d.backend == Backend::cpu && name == "cpu:0")) chosen = &d;
  }
  if (!chosen) {
    std::string known;
    for (const auto& d : devices) known += (known.empty() ? "" : ", ") + d.id();
    throw InvalidArgument("device '" + std::string(name) + "' not found (available: " + known + ", auto)");
  }
  // Devices live for the whole process and are never destroyed: ICDs tear themselves down
  // in atexit handlers, and destroying a context after that crashes some drivers.
  static std::mutex mutex;
  static auto* open = new std::map<std::string, std::shared_ptr<Device>>;
  std::lock_guard lock(mutex);
  auto& slot = (*open)[chosen->id()];
  if (!slot) slot = open_info(*chosen);
  return slot;
}

}  // namespace ejk
