// The CUDA backend's PeerGroup (ejk/peer.hpp): NCCL's point-to-point sends and receives on a
// stream of the group's own, ordered with the device's stream by events. NCCL is loaded at run
// time like the driver and NVRTC, and the few declarations used are written here (nccl.h's
// stable C ABI), so nothing of NCCL is needed to build.
#include "backends/cuda/transports.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "backends/cuda/cuda_device.hpp"
#include "ejk/error.hpp"
#include "ejk/peer.hpp"

namespace ejk::cuda {
namespace {

// nccl.h: an opaque communicator, a 128-byte id passed by value, ncclResult_t and
// ncclDataType_t as ints (ncclInt8 = 0, moved as bytes).
struct NcclComm;
using ncclComm_t = NcclComm*;
struct ncclUniqueId {
  char internal[128];
};
static_assert(sizeof(ncclUniqueId) == sizeof(PeerGroupKey));
constexpr int ncclSuccess = 0, ncclInt8 = 0;

struct Nccl {
  int (*GetVersion)(int*) = nullptr;
  const char* (*GetErrorString)(int) = nullptr;
  int (*GetUniqueId)(ncclUniqueId*) = nullptr;
  int (*CommInitRank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
  int (*CommDestroy)(ncclComm_t) = nullptr;
  int (*CommAbort)(ncclComm_t) = nullptr;
  int (*Send)(const void*, std::size_t, int, int, ncclComm_t, CUstream) = nullptr;
  int (*Recv)(void*, std::size_t, int, int, ncclComm_t, CUstream) = nullptr;
  int (*GroupStart)() = nullptr;
  int (*GroupEnd)() = nullptr;
  std::string name;  // "nccl 2.27.5 (path)"
};

template <class F>
bool take(void* lib, F& fn, const char* symbol) {
  fn = reinterpret_cast<F>(::dlsym(lib, symbol));
  return fn != nullptr;
}

// $EJK_NCCL, the loader's path, then pip's nvidia-nccl wheels (PyTorch installs one) in the
// usual site folders.
std::vector<std::string> candidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("EJK_NCCL"); env && *env) out.emplace_back(env);
  out.emplace_back("libnccl.so.2");
  std::vector<std::filesystem::path> roots{"/usr/local/lib", "/usr/lib", "/opt/conda/lib"};
  for (const char* var : {"VIRTUAL_ENV", "CONDA_PREFIX"})
    if (const char* v = std::getenv(var); v && *v) roots.emplace_back(std::filesystem::path(v) / "lib");
  if (const char* home = std::getenv("HOME"); home && *home) roots.emplace_back(std::filesystem::path(home) / ".local/lib");
  std::error_code ec;
  for (const auto& root : roots)
    for (const auto& e : std::filesystem::directory_iterator(root, ec))
      if (e.path().filename().string().starts_with("python3"))
        for (const char* site : {"site-packages", "dist-packages"})
          if (auto lib = e.path() / site / "nvidia/nccl/lib/libnccl.so.2"; std::filesystem::exists(lib, ec))
            out.push_back(lib.string());
  return out;
}

struct Loaded {
  Nccl nccl;
  std::string absent;
};

const Loaded& loaded() {
  static const Loaded l = [] {
    Loaded out;
    for (const auto& c : candidates()) {
      void* lib = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);  // kept for the process's life
      if (!lib) continue;
      Nccl n;
      if (!(take(lib, n.GetVersion, "ncclGetVersion") && take(lib, n.GetErrorString, "ncclGetErrorString") &&
            take(lib, n.GetUniqueId, "ncclGetUniqueId") && take(lib, n.CommInitRank, "ncclCommInitRank") &&
            take(lib, n.CommDestroy, "ncclCommDestroy") && take(lib, n.CommAbort, "ncclCommAbort") &&
            take(lib, n.Send, "ncclSend") && take(lib, n.Recv, "ncclRecv") && take(lib, n.GroupStart, "ncclGroupStart") &&
            take(lib, n.GroupEnd, "ncclGroupEnd")))
        continue;
      int v = 0;
      n.GetVersion(&v);
      // 2.19 and later: major * 10000 + minor * 100 + patch.
      n.name = "nccl " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100) +
               " (" + c + ")";
      out.nccl = n;
      return out;
    }
    out.absent = "NCCL not found: set EJK_NCCL to libnccl.so.2's path (looked on the loader's path and for the "
                 "nvidia-nccl wheel under the usual Python folders)";
    return out;
  }();
  return l;
}

void check_nccl(int r, const char* what) {
  if (r != ncclSuccess) throw DeviceError(std::string(what) + " failed: " + loaded().nccl.GetErrorString(r));
}

class NcclGroup final : public PeerGroup {
 public:
  NcclGroup(CudaDevice& dev, const PeerGroupKey& key, int rank, int size)
      : dev_(dev), d_(*driver()), n_(loaded().nccl), rank_(rank), size_(size) {
    dev_.current();
    check(d_.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    check(d_.cuEventCreate(&ready_, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    check(d_.cuEventCreate(&done_, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    ncclUniqueId id;
    std::memcpy(&id, key.bytes.data(), sizeof id);
    try {
      check_nccl(n_.CommInitRank(&comm_, size, id, rank), "ncclCommInitRank");
    } catch (...) {
      release();
      throw;
    }
  }
  ~NcclGroup() override {
    if (comm_) {
      dev_.current();
      // Queued moves must finish before their buffers or the communicator go.
      if (d_.cuStreamSynchronize(stream_) == CUDA_SUCCESS) n_.CommDestroy(comm_);
      else n_.CommAbort(comm_);
    }
    release();
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  void exchange(std::span<const Move> moves) override {
    if (moves.empty()) return;
    dev_.record(ready_);
    check(d_.cuStreamWaitEvent(stream_, ready_, 0), "cuStreamWaitEvent");
    check_nccl(n_.GroupStart(), "ncclGroupStart");
    int r = ncclSuccess;
    for (const Move& m : moves) {
      if (r != ncclSuccess) break;
      if (m.peer < 0 || m.peer >= size_) {
        n_.GroupEnd();
        throw InvalidArgument("PeerGroup::exchange: peer " + std::to_string(m.peer) + " of a group of " + std::to_string(size_));
      }
      if (m.send) r = n_.Send(reinterpret_cast<const void*>(ptr_of(*m.send)), m.bytes, ncclInt8, m.peer, comm_, stream_);
      else if (m.recv) r = n_.Recv(reinterpret_cast<void*>(ptr_of(*m.recv)), m.bytes, ncclInt8, m.peer, comm_, stream_);
    }
    const int end = n_.GroupEnd();
    check_nccl(r, "ncclSend/ncclRecv");
    check_nccl(end, "ncclGroupEnd");
  }

  void join() override {
    dev_.current();
    check(d_.cuEventRecord(done_, stream_), "cuEventRecord");
    dev_.wait(done_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

 private:
  void release() {
    if (done_) d_.cuEventDestroy(done_);
    if (ready_) d_.cuEventDestroy(ready_);
    if (stream_) d_.cuStreamDestroy(stream_);
  }

  CudaDevice& dev_;
  const Driver& d_;
  const Nccl& n_;
  int rank_, size_;
  CUstream stream_ = nullptr;
  CUevent ready_ = nullptr, done_ = nullptr;
  ncclComm_t comm_ = nullptr;
};

PeerTransport transport(Device& device) {
  const bool ok = loaded().absent.empty();
  return {loaded().absent, ok ? loaded().nccl.name : "", device_identity(cuda_device(device)), "nccl"};
}

PeerGroupKey new_key(Device& device) {
  cuda_device(device).current();
  ncclUniqueId id;
  check_nccl(loaded().nccl.GetUniqueId(&id), "ncclGetUniqueId");
  PeerGroupKey key;
  std::memcpy(key.bytes.data(), &id, sizeof id);
  return key;
}

std::unique_ptr<PeerGroup> open(Device& device, const PeerGroupKey& key, int rank, int size) {
  return std::make_unique<NcclGroup>(cuda_device(device), key, rank, size);
}

}  // namespace

const backends::PeerHooks nccl_hooks{&transport, &new_key, &open};

}  // namespace ejk::cuda
