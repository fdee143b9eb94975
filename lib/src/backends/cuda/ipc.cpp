// The CUDA backend's PeerGroup between the processes of one host when NCCL is absent (or
// $EJK_CUDA_PEER=ipc): each receiver copies straight from the sender's buffer, mapped into its own
// address space by CUDA IPC, on a stream of the group's own (over NVLink or PCIe peer access).
//
// The ranks' hosts agree on each move through a shared-memory segment named by the key. The
// sender publishes the buffer's allocation handle and an event recorded after the work that wrote
// it; the receiver queues a wait for that event and the copy, then records an event of its own,
// which the sender's join() makes its device wait for, so later work cannot overwrite a buffer a
// peer still reads. A wait binds to an event's latest record when it is queued, so each rank
// records into rings of `depth` events and records one again only once every wait on its previous
// record is queued; the hosts thus never run more than `depth` exchanges apart, and never wait for
// a device.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <chrono>
#include <map>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_device.hpp"
#include "backends/cuda/transports.hpp"
#include "ejk/error.hpp"
#include "ejk/peer.hpp"

namespace ejk::cuda {
namespace {

constexpr int depth = 32;  // events in each ring
constexpr int slots = 64;  // moves in flight from one rank to another
constexpr std::size_t mapped_limit = 64;  // peers' allocations kept mapped
constexpr auto patience = std::chrono::seconds(300);
constexpr char key_tag[] = "ejk cuda ipc ";

struct Descriptor {
  CUipcMemHandle memory;  // the allocation that holds the buffer
  std::uint64_t base;     // its address in the sender's space
  std::uint64_t offset, bytes;
  std::uint32_t event;  // in the sender's ready ring
};

// One ordered pair of ranks, sender to receiver; each count is the number of moves past a point.
struct Pair {
  alignas(64) std::atomic<std::uint64_t> published;  // described by the sender
  alignas(64) std::atomic<std::uint64_t> taken;      // the receiver's waits on their events queued
  alignas(64) std::atomic<std::uint64_t> consumed;   // the receiver's event after the copy recorded
  alignas(64) std::atomic<std::uint64_t> released;   // the sender's waits on those events queued
  Descriptor desc[slots];
  std::uint32_t consumed_event[slots];  // in the receiver's consumed ring
};

struct Rank {
  CUipcEventHandle ready[depth], consumed[depth];
};

struct Header {
  std::atomic<std::uint32_t> arrived;
  std::atomic<std::int32_t> failed;  // 1 + the first rank whose exchange or join threw
};

static_assert(std::atomic<std::uint64_t>::is_always_lock_free && std::atomic<std::uint32_t>::is_always_lock_free,
              "counters shared between processes must be lock-free");

std::size_t segment_bytes(int size) {
  const auto n = static_cast<std::size_t>(size);
  return sizeof(Header) + n * sizeof(Rank) + n * n * sizeof(Pair) + 64;
}

std::string key_name(const PeerGroupKey& key) {
  const auto* text = reinterpret_cast<const char*>(key.bytes.data());
  const std::size_t n = ::strnlen(text, key.bytes.size());
  const std::string s(text, n);
  if (n == key.bytes.size() || !s.starts_with(key_tag))
    throw InvalidArgument("open_peer_group: the key was not made by a CUDA IPC transport (was NCCL chosen on another rank?)");
  return s.substr(sizeof key_tag - 1);
}

// Spins, then yields, then sleeps: peers' hosts reach the same point within microseconds unless
// one of them stopped. `peer` is the rank waited for, -1 for any.
template <class Ready>
void await(const Header& h, Ready ready, int peer, const char* what) {
  const auto who = [&] { return peer < 0 ? std::string("some rank") : "rank " + std::to_string(peer); };
  const auto t0 = std::chrono::steady_clock::now();
  for (unsigned i = 0; !ready(); ++i) {
    if (const int f = h.failed.load(std::memory_order_acquire))
      throw DeviceError("CUDA IPC peer group: rank " + std::to_string(f - 1) + " failed (waiting for " + who() + " to " + what + ")");
    if (i < 256) continue;
    if (i < 4096) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(20));
    if ((i & 1023) == 0 && std::chrono::steady_clock::now() - t0 > patience)
      throw DeviceError("CUDA IPC peer group: " + who() + " did not " + what + " within " + std::to_string(patience.count()) + " s");
  }
}

class Segment {
 public:
  Segment(const std::string& name, int size) : bytes_(segment_bytes(size)) {
    const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT, 0600);
    if (fd < 0) throw DeviceError("shm_open(" + name + "): " + std::strerror(errno));
    // Every rank sizes it alike; a fresh segment reads as zeros.
    const bool sized = ::ftruncate(fd, static_cast<off_t>(bytes_)) == 0;
    const int err = errno;
    void* p = sized ? ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    const int map_err = errno;
    ::close(fd);
    if (!sized) throw DeviceError("ftruncate(" + name + "): " + std::strerror(err));
    if (p == MAP_FAILED) throw DeviceError("mmap(" + name + "): " + std::strerror(map_err));
    base_ = static_cast<std::byte*>(p);
    const auto n = static_cast<std::size_t>(size);
    header_ = reinterpret_cast<Header*>(base_);
    ranks_ = reinterpret_cast<Rank*>(base_ + sizeof(Header));
    pairs_ = reinterpret_cast<Pair*>(base_ + ((sizeof(Header) + n * sizeof(Rank) + 63) / 64) * 64);
    size_ = size;
  }
  ~Segment() { ::munmap(base_, bytes_); }
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  Header& header() { return *header_; }
  Rank& rank(int r) { return ranks_[r]; }
  Pair& pair(int from, int to) { return pairs_[static_cast<std::size_t>(from) * static_cast<std::size_t>(size_) + static_cast<std::size_t>(to)]; }

 private:
  std::size_t bytes_;
  std::byte* base_ = nullptr;
  Header* header_ = nullptr;
  Rank* ranks_ = nullptr;
  Pair* pairs_ = nullptr;
  int size_ = 0;
};

class IpcGroup final : public PeerGroup {
 public:
  IpcGroup(CudaDevice& dev, const PeerGroupKey& key, int rank, int size)
      : dev_(dev), d_(*driver()), rank_(rank), size_(size), name_(key_name(key)), seg_(name_, size),
        peers_(static_cast<std::size_t>(size)) {
    try {
      dev_.current();
      check(d_.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
      check(d_.cuEventCreate(&start_, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
      check(d_.cuEventCreate(&done_, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
      Rank& mine = seg_.rank(rank_);
      for (int i = 0; i < depth; ++i) {
        ready_[i] = shared_event();
        consumed_[i] = shared_event();
        check(d_.cuIpcGetEventHandle(&mine.ready[i], ready_[i]), "cuIpcGetEventHandle");
        check(d_.cuIpcGetEventHandle(&mine.consumed[i], consumed_[i]), "cuIpcGetEventHandle");
      }
      seg_.header().arrived.fetch_add(1, std::memory_order_acq_rel);
      await(seg_.header(), [&] { return seg_.header().arrived.load(std::memory_order_acquire) >= static_cast<std::uint32_t>(size_); },
            -1, "open the group");
    } catch (...) {
      if (rank_ == 0) ::shm_unlink(name_.c_str());
      release();
      throw;
    }
    // Every rank has it mapped: the name is no longer needed.
    if (rank_ == 0) ::shm_unlink(name_.c_str());
  }

  ~IpcGroup() override {
    dev_.current();
    // Queued copies read peers' mappings: they finish before the mappings go.
    d_.cuStreamSynchronize(stream_);
    for (auto& m : mapped_) d_.cuIpcCloseMemHandle(m.base);
    release();
  }
  IpcGroup(const IpcGroup&) = delete;
  IpcGroup& operator=(const IpcGroup&) = delete;

  void exchange(std::span<const Move> moves) override {
    if (moves.empty()) return;
    for (const Move& m : moves) {
      if (m.peer < 0 || m.peer >= size_ || m.peer == rank_)
        throw InvalidArgument("PeerGroup::exchange: peer " + std::to_string(m.peer) + " from rank " + std::to_string(rank_) +
                              " of a group of " + std::to_string(size_));
      if ((m.send == nullptr) == (m.recv == nullptr))
        throw InvalidArgument("PeerGroup::exchange: a move needs exactly one of send and recv");
    }
    dev_.current();
    failing([&] {
      send_all(moves);
      receive_all(moves);
    });
  }

  void join() override {
    dev_.current();
    failing([&] { join_all(); });
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

 private:
  // The peers stop waiting for a rank that failed, and say which.
  template <class Work>
  void failing(Work work) {
    try {
      work();
    } catch (...) {
      std::int32_t none = 0;
      seg_.header().failed.compare_exchange_strong(none, rank_ + 1, std::memory_order_acq_rel);
      throw;
    }
  }

  void join_all() {
    if (received_) {
      dev_.wait(done_);
      received_ = false;
    }
    // Later work may overwrite what was sent once the peers' copies of it are done.
    for (const auto& [peer, seq] : unreleased_) {
      Pair& p = seg_.pair(rank_, peer);
      await(seg_.header(), [&] { return p.consumed.load(std::memory_order_acquire) > seq; }, peer, "copy what this rank sent");
      dev_.wait(peer_event(peer, p.consumed_event[seq % slots], false));
      p.released.store(seq + 1, std::memory_order_release);
    }
    unreleased_.clear();
  }

  struct Mapping {
    int peer;
    CUipcMemHandle handle;
    std::uint64_t sender_base;
    CUdeviceptr base;
    std::uint64_t used;
  };
  struct Peer {
    CUevent ready[depth] = {}, consumed[depth] = {};
  };
  using Moves = std::vector<std::pair<int, std::uint64_t>>;  // (peer, the pair's move number)

  CUevent shared_event() {
    CUevent e = nullptr;
    check(d_.cuEventCreate(&e, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING), "cuEventCreate(interprocess)");
    return e;
  }

  CUevent peer_event(int peer, std::uint32_t index, bool ready) {
    if (index >= depth) throw DeviceError("CUDA IPC peer group: rank " + std::to_string(peer) + " named event " + std::to_string(index));
    Peer& p = peers_[static_cast<std::size_t>(peer)];
    CUevent& e = ready ? p.ready[index] : p.consumed[index];
    if (!e) {
      CUipcEventHandle h = ready ? seg_.rank(peer).ready[index] : seg_.rank(peer).consumed[index];
      check(d_.cuIpcOpenEventHandle(&e, h), "cuIpcOpenEventHandle");
    }
    return e;
  }

  // Before an event of a ring is recorded again, every wait on its previous record is queued.
  void reuse(Moves& previous, bool ready) {
    for (const auto& [peer, seq] : previous) {
      Pair& p = ready ? seg_.pair(rank_, peer) : seg_.pair(peer, rank_);
      std::atomic<std::uint64_t>& count = ready ? p.taken : p.released;
      await(seg_.header(), [&] { return count.load(std::memory_order_acquire) > seq; }, peer,
            ready ? "take an earlier move (more exchanges in flight than the group holds)"
                  : "join an earlier exchange (more exchanges in flight than the group holds)");
    }
    previous.clear();
  }

  void send_all(std::span<const Move> moves) {
    if (std::none_of(moves.begin(), moves.end(), [](const Move& m) { return m.send != nullptr; })) return;
    const std::uint32_t j = static_cast<std::uint32_t>(sends_++ % depth);
    reuse(ready_moves_[j], true);
    dev_.record(ready_[j]);
    for (const Move& m : moves) {
      if (!m.send) continue;
      Pair& p = seg_.pair(rank_, m.peer);
      std::uint64_t& seq = sent_[m.peer];
      await(seg_.header(), [&] { return p.taken.load(std::memory_order_acquire) + slots > seq; }, m.peer,
            "take earlier moves (more in flight than the group holds)");
      Descriptor& d = p.desc[seq % slots];
      CUdeviceptr base = 0;
      std::size_t span = 0;
      const CUdeviceptr ptr = ptr_of(*m.send);
      check(d_.cuMemGetAddressRange(&base, &span, ptr), "cuMemGetAddressRange");
      if (ptr - base + m.bytes > span) throw InvalidArgument("PeerGroup::exchange: a send of " + std::to_string(m.bytes) + " bytes runs past its buffer");
      check(d_.cuIpcGetMemHandle(&d.memory, base), "cuIpcGetMemHandle");
      d.base = base, d.offset = ptr - base, d.bytes = m.bytes, d.event = j;
      ready_moves_[j].emplace_back(m.peer, seq);
      unreleased_.emplace_back(m.peer, seq);
      p.published.store(++seq, std::memory_order_release);
    }
  }

  void receive_all(std::span<const Move> moves) {
    if (std::none_of(moves.begin(), moves.end(), [](const Move& m) { return m.recv != nullptr; })) return;
    const std::uint32_t c = static_cast<std::uint32_t>(receives_++ % depth);
    reuse(consumed_moves_[c], false);
    // Nothing lands in a buffer before the work already submitted (which may read it) is done.
    dev_.record(start_);
    check(d_.cuStreamWaitEvent(stream_, start_, 0), "cuStreamWaitEvent");
    Moves mine;
    for (const Move& m : moves) {
      if (!m.recv) continue;
      Pair& p = seg_.pair(m.peer, rank_);
      const std::uint64_t seq = received_from_[m.peer]++;
      await(seg_.header(), [&] { return p.published.load(std::memory_order_acquire) > seq; }, m.peer, "send its part of the exchange");
      const Descriptor d = p.desc[seq % slots];
      if (d.bytes != m.bytes)
        throw InvalidArgument("PeerGroup::exchange: rank " + std::to_string(rank_) + " receives " + std::to_string(m.bytes) +
                              " bytes from rank " + std::to_string(m.peer) + ", which sends " + std::to_string(d.bytes));
      check(d_.cuStreamWaitEvent(stream_, peer_event(m.peer, d.event, true), 0), "cuStreamWaitEvent");
      p.taken.store(seq + 1, std::memory_order_release);
      const CUdeviceptr src = mapping(m.peer, d) + d.offset;
      check(d_.cuMemcpyDtoDAsync(ptr_of(*m.recv), src, m.bytes, stream_), "cuMemcpyDtoDAsync(peer)");
      mine.emplace_back(m.peer, seq);
    }
    check(d_.cuEventRecord(consumed_[c], stream_), "cuEventRecord");
    check(d_.cuEventRecord(done_, stream_), "cuEventRecord");
    received_ = true;
    for (const auto& [peer, seq] : mine) {
      Pair& p = seg_.pair(peer, rank_);
      // The sender reads consumed_event[seq % slots] for its move `seq`; the slot's previous move
      // must have been read (released) first.
      if (seq >= slots)
        await(seg_.header(), [&] { return p.released.load(std::memory_order_acquire) > seq - slots; }, peer, "join an earlier exchange");
      p.consumed_event[seq % slots] = c;
      p.consumed.store(seq + 1, std::memory_order_release);
    }
    consumed_moves_[c] = std::move(mine);
  }

  // A peer's allocation in this process's address space, opened once and kept (the buffers of a
  // ring come from the peers' scratch pools, so the same few recur). A new handle at an address
  // already mapped means the sender freed that allocation and made another there: the old mapping
  // goes (CUDA refuses to map over it).
  CUdeviceptr mapping(int peer, const Descriptor& d) {
    ++uses_;
    for (auto& m : mapped_)
      if (m.peer == peer && std::memcmp(&m.handle, &d.memory, sizeof d.memory) == 0) {
        m.used = uses_;
        return m.base;
      }
    close_if([&](const Mapping& m) { return m.peer == peer && m.sender_base == d.base; });
    if (mapped_.size() >= mapped_limit) {
      std::uint64_t oldest = uses_;
      for (const auto& m : mapped_) oldest = std::min(oldest, m.used);
      close_if([&](const Mapping& m) { return m.used == oldest; });
    }
    CUdeviceptr base = 0;
    CUresult r = d_.cuIpcOpenMemHandle(&base, d.memory, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (r == CUDA_ERROR_ALREADY_MAPPED) {  // overlapping a freed allocation at another address
      close_if([&](const Mapping& m) { return m.peer == peer; });
      r = d_.cuIpcOpenMemHandle(&base, d.memory, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    }
    check(r, "cuIpcOpenMemHandle (rank " + std::to_string(peer) + "'s buffer; the devices need peer access)");
    mapped_.push_back({peer, d.memory, d.base, base, uses_});
    return base;
  }

  // Copies already queued may read the mappings: they finish first.
  template <class Pred>
  void close_if(Pred pred) {
    bool synced = false;
    for (auto it = mapped_.begin(); it != mapped_.end();) {
      if (!pred(*it)) {
        ++it;
        continue;
      }
      if (!synced) check(d_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
      synced = true;
      check(d_.cuIpcCloseMemHandle(it->base), "cuIpcCloseMemHandle");
      it = mapped_.erase(it);
    }
  }

  void release() {
    for (auto& p : peers_)
      for (int i = 0; i < depth; ++i) {
        if (p.ready[i]) d_.cuEventDestroy(p.ready[i]);
        if (p.consumed[i]) d_.cuEventDestroy(p.consumed[i]);
      }
    for (int i = 0; i < depth; ++i) {
      if (ready_[i]) d_.cuEventDestroy(ready_[i]);
      if (consumed_[i]) d_.cuEventDestroy(consumed_[i]);
    }
    if (done_) d_.cuEventDestroy(done_);
    if (start_) d_.cuEventDestroy(start_);
    if (stream_) d_.cuStreamDestroy(stream_);
  }

  CudaDevice& dev_;
  const Driver& d_;
  int rank_, size_;
  std::string name_;
  Segment seg_;
  CUstream stream_ = nullptr;
  CUevent start_ = nullptr, done_ = nullptr;
  CUevent ready_[depth] = {}, consumed_[depth] = {};
  std::vector<Peer> peers_;
  Moves ready_moves_[depth], consumed_moves_[depth], unreleased_;
  std::map<int, std::uint64_t> sent_, received_from_;
  std::uint64_t sends_ = 0, receives_ = 0, uses_ = 0;
  std::vector<Mapping> mapped_;
  bool received_ = false;
};

PeerTransport transport(Device& device) {
  CudaDevice& dev = cuda_device(device);
  int unified = 0;
  check(driver()->cuDeviceGetAttribute(&unified, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, dev.handle()), "cuDeviceGetAttribute");
  // Drivers before the attribute existed answer with an error; their IPC events work on Linux.
  int events = 1;
  if (driver()->cuDeviceGetAttribute(&events, CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED, dev.handle()) != CUDA_SUCCESS) events = 1;
  std::string absent;
  if (!unified) absent = "CUDA IPC needs unified addressing, which " + device.info().id() + " lacks";
  else if (!events) absent = "CUDA IPC events are not supported on " + device.info().id();
  if (!absent.empty()) absent += "; NCCL not found either (set EJK_NCCL to libnccl.so.2's path)";
  const std::string host = host_name();
  return {absent, absent.empty() ? "cuda ipc" : "", device_identity(dev), "cuda ipc on " + host};
}

PeerGroupKey new_key(Device&) {
  std::random_device rd;
  const std::string name = std::string(key_tag) + "/ejk-peer-" + std::to_string(::getpid()) + "-" + std::to_string(rd()) +
                           std::to_string(rd());
  PeerGroupKey key;
  std::memcpy(key.bytes.data(), name.data(), name.size());
  return key;
}

std::unique_ptr<PeerGroup> open(Device& device, const PeerGroupKey& key, int rank, int size) {
  return std::make_unique<IpcGroup>(cuda_device(device), key, rank, size);
}

}  // namespace

const backends::PeerHooks ipc_hooks{&transport, &new_key, &open};

}  // namespace ejk::cuda
