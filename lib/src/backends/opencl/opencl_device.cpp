#include "backends/opencl/opencl_device.hpp"

#include <algorithm>
#include <bit>
#include <limits>
#include <string>

#include "core/embedded.hpp"
#include "core/sha256.hpp"
#include "ejk/error.hpp"

namespace ejk::opencl {

// One cache slot per (source hash, options). Its own mutex lets different programs build
// concurrently while a second request for the same one waits for the first build.
struct OpenCLDevice::ProgramEntry {
  std::mutex mutex;
  bool done = false;
  ProgramHandle program;
  std::string error;  // the CompileError message of a failed build
};

struct OpenCLDevice::Recording {
  std::vector<EventHandle> events;
  std::vector<std::string> kernels;  // per event: its kernel's name, or empty
  std::size_t commands = 0;          // enqueued while recording, with or without an event
  bool every = false;                // an event for every command (time_passes)
};

namespace {

class ClFence final : public Fence {
 public:
  explicit ClFence(EventHandle event) : event_(std::move(event)) {}
  cl_event event() const { return event_.get(); }
  bool reached() override {
    cl_int status = CL_QUEUED;
    check(clGetEventInfo(event_.get(), CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr),
          "clGetEventInfo(CL_EVENT_COMMAND_EXECUTION_STATUS)");
    if (status < 0) fail(status, "a command before the fence");
    return status == CL_COMPLETE;
  }
  void wait() override {
    cl_event e = event_.get();
    check(clWaitForEvents(1, &e), "clWaitForEvents");
  }

 private:
  EventHandle event_;
};

// Kept mapped for its whole life: the mapped pointer is what reads and writes of other buffers
// copy to and from, which drivers recognise as pinned. Mapped and unmapped on the transfer
// queue, whose copies (the only users of the mapping on the device side) end first.
class ClHostBuffer final : public HostBuffer {
 public:
  ClHostBuffer(MemHandle mem, QueueHandle transfer, void* mapped, std::size_t bytes)
      : HostBuffer(static_cast<std::byte*>(mapped), bytes, true), mem_(std::move(mem)), transfer_(std::move(transfer)) {}
  ~ClHostBuffer() override {
    if (clEnqueueUnmapMemObject(transfer_.get(), mem_.get(), data(), 0, nullptr, nullptr) == CL_SUCCESS)
      clFinish(transfer_.get());
  }

 private:
  MemHandle mem_;
  QueueHandle transfer_;
};

// The event of an OpenCL fence as a wait list of zero or one events.
std::vector<cl_event> wait_list(const FencePtr& f) {
  if (!f) return {};
  auto* cf = dynamic_cast<ClFence*>(f.get());
  if (!cf) throw InvalidArgument("a fence of another device or backend given to an OpenCL device");
  return {cf->event()};
}

// A copy queued on the transfer queue after `after` by `enqueue` (given the wait list and the
// event to fill), or a marker where there is nothing to copy, so that the fence still follows
// `after`.
template <class Enqueue>
FencePtr on_transfers(cl_command_queue q, const FencePtr& after, std::size_t bytes, const char* what, Enqueue enqueue) {
  const auto events = wait_list(after);
  const auto n = static_cast<cl_uint>(events.size());
  EventHandle event;
  if (bytes == 0) check(clEnqueueMarkerWithWaitList(q, n, events.data(), event.out()), "clEnqueueMarkerWithWaitList");
  else check(enqueue(n, events.data(), event.out()), what);
  check(clFlush(q), "clFlush(transfers)");
  return std::make_shared<ClFence>(std::move(event));
}

}  // namespace

OpenCLDevice::OpenCLDevice(cl_platform_id platform, cl_device_id device, DeviceInfo info)
    : platform_(platform), device_(device), info_(std::move(info)) {
  cl_int err = CL_SUCCESS;
  const cl_context_properties props[] = {CL_CONTEXT_PLATFORM, reinterpret_cast<cl_context_properties>(platform), 0};
  context_ = ContextHandle(clCreateContext(props, 1, &device_, nullptr, nullptr, &err));
  check(err, "clCreateContext(" + info_.name + ")");
  // clCreateCommandQueue is deprecated since 2.0 but is the one call every driver (NVIDIA's
  // OpenCL 3.0 included) accepts; the properties form needs 2.0.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  queue_ = QueueHandle(clCreateCommandQueue(context_.get(), device_, CL_QUEUE_PROFILING_ENABLE, &err));
#pragma GCC diagnostic pop
  check(err, "clCreateCommandQueue(" + info_.name + ")");
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  transfer_ = QueueHandle(clCreateCommandQueue(context_.get(), device_, 0, &err));
#pragma GCC diagnostic pop
  check(err, "clCreateCommandQueue(" + info_.name + ", transfers)");
  cl_device_fp_config fp = 0;
  check(clGetDeviceInfo(device_, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, nullptr),
        "clGetDeviceInfo(CL_DEVICE_SINGLE_FP_CONFIG)");
  hardware_fma_ = (fp & CL_FP_FMA) && !(fp & CL_FP_SOFT_FLOAT);
  cl_device_type type = 0;
  check(clGetDeviceInfo(device_, CL_DEVICE_TYPE, sizeof type, &type, nullptr), "clGetDeviceInfo(CL_DEVICE_TYPE)");
  store_ = ProgramStore::open("opencl", !(type & CL_DEVICE_TYPE_CPU));
}

OpenCLDevice::~OpenCLDevice() {
  if (transfer_) clFinish(transfer_.get());
  if (queue_) clFinish(queue_.get());
}

std::shared_ptr<Buffer> OpenCLDevice::scratch(std::size_t bytes) {
  return scratch_->take(bytes, [this](std::size_t n) { return allocate(n); });
}

std::shared_ptr<Buffer> OpenCLDevice::allocate(std::size_t bytes) {
  if (info_.max_buffer && bytes > info_.max_buffer)
    throw ResourceError("allocating " + std::to_string(bytes) + " bytes on " + info_.id() + ": the largest buffer is " +
                        std::to_string(info_.max_buffer) + " bytes");
  cl_int err = CL_SUCCESS;
  // OpenCL refuses empty buffers; a zero-byte Buffer still needs something to bind.
  MemHandle mem(clCreateBuffer(context_.get(), CL_MEM_READ_WRITE, std::max<std::size_t>(bytes, 4), nullptr, &err));
  check(err, "clCreateBuffer(" + std::to_string(bytes) + " bytes)");
  return std::make_shared<ClBuffer>(std::move(mem), bytes);
}

void OpenCLDevice::write(Buffer& dst, std::size_t offset, const void* src, std::size_t bytes) {
  if (offset + bytes > dst.bytes())
    throw InvalidArgument("write of " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
                          " past the end of a buffer of " + std::to_string(dst.bytes()));
  if (bytes == 0) return;
  check(clEnqueueWriteBuffer(queue_.get(), mem_of(dst), CL_TRUE, offset, bytes, src, 0, nullptr, nullptr),
        "clEnqueueWriteBuffer");
}

void OpenCLDevice::read(const Buffer& src, std::size_t offset, void* dst, std::size_t bytes) {
  if (offset + bytes > src.bytes())
    throw InvalidArgument("read of " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
                          " past the end of a buffer of " + std::to_string(src.bytes()));
  if (bytes == 0) return;
  check(clEnqueueReadBuffer(queue_.get(), mem_of(src), CL_TRUE, offset, bytes, dst, 0, nullptr, nullptr),
        "clEnqueueReadBuffer");
}

void OpenCLDevice::copy(const Buffer& src, std::size_t src_offset, Buffer& dst, std::size_t dst_offset,
                        std::size_t bytes) {
  check_copy(src, src_offset, dst, dst_offset, bytes);
  if (bytes == 0) return;
  EventHandle event;
  check(clEnqueueCopyBuffer(queue_.get(), mem_of(src), mem_of(dst), src_offset, dst_offset, bytes, 0, nullptr,
                            event_slot(event)),
        "clEnqueueCopyBuffer");
  if (event) add_event(event.get());
}

void OpenCLDevice::synchronize() {
  check(clFinish(queue_.get()), "clFinish(" + info_.id() + ")");
  check(clFinish(transfer_.get()), "clFinish(" + info_.id() + ", transfers)");
}

std::shared_ptr<HostBuffer> OpenCLDevice::allocate_host(std::size_t bytes) {
  cl_int err = CL_SUCCESS;
  const std::size_t size = std::max<std::size_t>(bytes, 4);
  MemHandle mem(clCreateBuffer(context_.get(), CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, size, nullptr, &err));
  check(err, "clCreateBuffer(CL_MEM_ALLOC_HOST_PTR, " + std::to_string(bytes) + " bytes)");
  void* mapped = clEnqueueMapBuffer(transfer_.get(), mem.get(), CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, size, 0, nullptr,
                                    nullptr, &err);
  check(err, "clEnqueueMapBuffer(" + std::to_string(bytes) + " bytes)");
  return std::make_shared<ClHostBuffer>(std::move(mem), transfer_, mapped, bytes);
}

FencePtr OpenCLDevice::mark() {
  EventHandle event;
  check(clEnqueueMarkerWithWaitList(queue_.get(), 0, nullptr, event.out()), "clEnqueueMarkerWithWaitList");
  check(clFlush(queue_.get()), "clFlush");
  return std::make_shared<ClFence>(std::move(event));
}

void OpenCLDevice::order_after(const FencePtr& fence) {
  const auto events = wait_list(fence);
  if (events.empty()) return;
  check(clEnqueueBarrierWithWaitList(queue_.get(), 1, events.data(), nullptr), "clEnqueueBarrierWithWaitList");
}

FencePtr OpenCLDevice::queue_upload(const HostBuffer& src, std::size_t src_offset, Buffer& dst, std::size_t dst_offset,
                                    std::size_t bytes, const FencePtr& after) {
  return on_transfers(transfer_.get(), after, bytes, "clEnqueueWriteBuffer(transfers)", [&](cl_uint n, const cl_event* w, cl_event* e) {
    return clEnqueueWriteBuffer(transfer_.get(), mem_of(dst), CL_FALSE, dst_offset, bytes, src.data() + src_offset, n, w, e);
  });
}

FencePtr OpenCLDevice::queue_download(const Buffer& src, std::size_t src_offset, HostBuffer& dst, std::size_t dst_offset,
                                      std::size_t bytes, const FencePtr& after) {
  return on_transfers(transfer_.get(), after, bytes, "clEnqueueReadBuffer(transfers)", [&](cl_uint n, const cl_event* w, cl_event* e) {
    return clEnqueueReadBuffer(transfer_.get(), mem_of(src), CL_FALSE, src_offset, bytes, dst.data() + dst_offset, n, w, e);
  });
}

cl_event* OpenCLDevice::event_slot(EventHandle& event) {
  if (!recording()) return nullptr;
  std::lock_guard lock(recording_mutex_);
  bool wanted = false;
  for (Recording* r : recordings_) wanted |= r->commands++ == 0 || r->every;
  return wanted ? event.out() : nullptr;
}

void OpenCLDevice::add_event(cl_event e, std::string_view kernel) {
  std::lock_guard lock(recording_mutex_);
  for (Recording* r : recordings_) {
    clRetainEvent(e);
    r->events.emplace_back(e);
    r->kernels.emplace_back(kernel);
  }
}

void OpenCLDevice::record(cl_event event) {
  if (event && recording()) add_event(event);
}

void OpenCLDevice::record_into(Recording& rec, const std::function<void()>& work) {
  {
    std::lock_guard lock(recording_mutex_);
    recordings_.push_back(&rec);
    recording_.fetch_add(1, std::memory_order_release);
  }
  auto stop = [&] {
    std::lock_guard lock(recording_mutex_);
    recordings_.erase(std::find(recordings_.begin(), recordings_.end(), &rec));
    recording_.fetch_sub(1, std::memory_order_release);
  };
  try {
    work();
  } catch (...) {
    stop();
    throw;
  }
  stop();
}

namespace {

cl_ulong profiling(cl_event e, cl_profiling_info what) {
  cl_ulong t = 0;
  check(clGetEventProfilingInfo(e, what, sizeof t, &t, nullptr),
        what == CL_PROFILING_COMMAND_START ? "clGetEventProfilingInfo(START)" : "clGetEventProfilingInfo(END)");
  return t;
}

}  // namespace

double OpenCLDevice::time_ns(const std::function<void()>& work) {
  Recording rec;
  record_into(rec, work);
  // Commands that returned no event end no later than a marker behind them, which the in-order
  // queue completes after them; its start time is not the work's, only its end.
  EventHandle marker;
  if (rec.commands > rec.events.size())
    check(clEnqueueMarkerWithWaitList(queue_.get(), 0, nullptr, marker.out()), "clEnqueueMarkerWithWaitList");
  // The compute queue alone: transfers beside it are not part of `work`.
  check(clFinish(queue_.get()), "clFinish(" + info_.id() + ")");
  if (rec.events.empty()) return 0.0;
  cl_ulong first = std::numeric_limits<cl_ulong>::max(), last = 0;
  for (const auto& e : rec.events) {
    first = std::min(first, profiling(e.get(), CL_PROFILING_COMMAND_START));
    last = std::max(last, profiling(e.get(), CL_PROFILING_COMMAND_END));
  }
  if (marker) last = std::max(last, profiling(marker.get(), CL_PROFILING_COMMAND_END));
  return last > first ? static_cast<double>(last - first) : 0.0;
}

std::vector<PassTime> OpenCLDevice::time_passes(const std::function<void()>& work) {
  Recording rec;
  rec.every = true;
  record_into(rec, work);
  check(clFinish(queue_.get()), "clFinish(" + info_.id() + ")");
  std::vector<PassTime> out;
  for (std::size_t i = 0; i < rec.events.size(); ++i) {
    if (rec.kernels[i].empty()) continue;
    const cl_ulong start = profiling(rec.events[i].get(), CL_PROFILING_COMMAND_START),
                   end = profiling(rec.events[i].get(), CL_PROFILING_COMMAND_END);
    out.push_back({rec.kernels[i], end > start ? static_cast<double>(end - start) : 0.0});
  }
  return out;
}

ProgramHandle OpenCLDevice::from_binary(const std::string& stored_key, std::string_view options) {
  const auto bytes = store_->load(stored_key);
  if (!bytes) return {};
  const unsigned char* data = bytes->data();
  const std::size_t size = bytes->size();
  cl_int status = CL_SUCCESS, err = CL_SUCCESS;
  ProgramHandle program(clCreateProgramWithBinary(context_.get(), 1, &device_, &size, &data, &status, &err));
  if (err != CL_SUCCESS || status != CL_SUCCESS || !program) return {};
  const std::string opts(options);
  // A binary the driver no longer takes (it was updated in place) is built from source again.
  if (clBuildProgram(program.get(), 1, &device_, opts.c_str(), nullptr, nullptr) != CL_SUCCESS) return {};
  return program;
}

void OpenCLDevice::keep_binary(const std::string& stored_key, cl_program program) {
  std::size_t size = 0;
  if (clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, nullptr) != CL_SUCCESS || size == 0) return;
  std::vector<unsigned char> bytes(size);
  unsigned char* data = bytes.data();
  if (clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof data, &data, nullptr) != CL_SUCCESS) return;
  store_->store(stored_key, bytes);
}

ProgramHandle OpenCLDevice::build(const std::string& source_hash, std::string_view source, std::string_view origin,
                                  std::string_view options) {
  std::string key = source_hash;
  key += '\n';
  key += options;
  std::shared_ptr<ProgramEntry> entry;
  {
    std::lock_guard lock(cache_mutex_);
    auto it = programs_.find(key);
    if (it == programs_.end()) {
      it = programs_.emplace(key, std::make_shared<ProgramEntry>()).first;
    }
    entry = it->second;
  }
  std::lock_guard lock(entry->mutex);
  if (entry->done) {
    std::lock_guard stats_lock(cache_mutex_);
    ++stats_.hits;
  } else {
    entry->done = true;
    const std::string stored_key = info_.fingerprint() + '\n' + key;
    if (store_)
      if (ProgramHandle program = from_binary(stored_key, options)) {
        entry->program = program;
        std::lock_guard stats_lock(cache_mutex_);
        ++stats_.loaded;
        return entry->program;
      }
    {
      std::lock_guard stats_lock(cache_mutex_);
      ++stats_.builds;
    }
    cl_int err = CL_SUCCESS;
    const char* text = source.data();
    std::size_t length = source.size();
    ProgramHandle program(clCreateProgramWithSource(context_.get(), 1, &text, &length, &err));
    check(err, "clCreateProgramWithSource(" + std::string(origin) + ")");
    std::string opts(options);
    err = clBuildProgram(program.get(), 1, &device_, opts.c_str(), nullptr, nullptr);
    if (err == CL_SUCCESS) {
      entry->program = program;
      if (store_) keep_binary(stored_key, program.get());
    } else {
      std::size_t size = 0;
      std::string log;
      if (clGetProgramBuildInfo(program.get(), device_, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size) == CL_SUCCESS &&
          size > 1) {
        log.resize(size);
        clGetProgramBuildInfo(program.get(), device_, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
        while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
      }
      entry->error = "clBuildProgram(" + std::string(origin) + ") failed: " + error_name(err) + " on " + info_.id() +
                     " (" + info_.name + ") with options '" + opts + "'" + (log.empty() ? "" : ":\n" + log);
      std::lock_guard stats_lock(cache_mutex_);
      ++stats_.failures;
    }
  }
  // A failed build is remembered, so a tuner asking again gets the same answer at once.
  if (!entry->program) throw CompileError(entry->error);
  return entry->program;
}

std::shared_ptr<ClKernel> OpenCLDevice::kernel_for(const std::string& source_hash, std::string_view source,
                                                   std::string_view origin, std::string_view options,
                                                   std::string_view name) {
  std::string key = source_hash;
  key += '\n';
  key += options;
  key += '\n';
  key += name;
  {
    std::lock_guard lock(cache_mutex_);
    auto it = kernels_.find(key);
    if (it != kernels_.end()) {
      ++stats_.hits;
      return it->second;
    }
  }
  ProgramHandle program = build(source_hash, source, origin, options);
  std::string kname(name);
  cl_int err = CL_SUCCESS;
  KernelHandle k(clCreateKernel(program.get(), kname.c_str(), &err));
  if (err == CL_INVALID_KERNEL_NAME)
    throw NotFound("no kernel '" + kname + "' in " + std::string(origin) + " (options '" + std::string(options) + "')");
  check(err, "clCreateKernel(" + kname + ")");
  std::size_t wg = 0;
  cl_ulong local = 0;
  cl_uint nargs = 0;
  check(clGetKernelWorkGroupInfo(k.get(), device_, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg, nullptr),
        "clGetKernelWorkGroupInfo(" + kname + ", CL_KERNEL_WORK_GROUP_SIZE)");
  check(clGetKernelWorkGroupInfo(k.get(), device_, CL_KERNEL_LOCAL_MEM_SIZE, sizeof local, &local, nullptr),
        "clGetKernelWorkGroupInfo(" + kname + ", CL_KERNEL_LOCAL_MEM_SIZE)");
  check(clGetKernelInfo(k.get(), CL_KERNEL_NUM_ARGS, sizeof nargs, &nargs, nullptr),
        "clGetKernelInfo(" + kname + ", CL_KERNEL_NUM_ARGS)");
  auto made = std::make_shared<ClKernel>(std::move(k), std::move(program), kname, wg, local, nargs);
  std::lock_guard lock(cache_mutex_);
  return kernels_.emplace(std::move(key), std::move(made)).first->second;
}

std::shared_ptr<clc::Kernel> OpenCLDevice::kernel(std::string_view source_key, std::string_view options,
                                               std::string_view name) {
  std::shared_ptr<const Source> source;
  {
    std::lock_guard lock(cache_mutex_);
    auto it = sources_.find(source_key);
    if (it != sources_.end()) source = it->second;
  }
  if (!source) {
    std::string text = clc::with_includes(source_key, detail::embedded(source_key).text());
    auto made = std::make_shared<const Source>(Source{detail::sha256_hex(text), std::move(text)});
    std::lock_guard lock(cache_mutex_);
    source = sources_.emplace(std::string(source_key), std::move(made)).first->second;
  }
  return kernel_for(source->hash, source->text, source_key, options, name);
}

std::shared_ptr<ClKernel> OpenCLDevice::kernel_from_source(std::string_view source, std::string_view options,
                                                           std::string_view name) {
  return kernel_for(detail::sha256_hex(source), source, "<source>", options, name);
}

ProgramCacheStats OpenCLDevice::program_cache_stats() const {
  std::lock_guard lock(cache_mutex_);
  return stats_;
}

void OpenCLDevice::set_raw(const ClKernel& k, cl_uint index, std::size_t size, const void* value) const {
  cl_int err = clSetKernelArg(k.get(), index, size, value);
  if (err != CL_SUCCESS)
    fail(err, "clSetKernelArg(" + k.name() + ", argument " + std::to_string(index) + ", " + std::to_string(size) +
                  " bytes)");
}

void OpenCLDevice::launch_args(clc::Kernel& kernel, const Range& global, const Range& local,
                               std::span<const clc::Arg> args) {
  auto& k = static_cast<ClKernel&>(kernel);
  std::lock_guard lock(k.mutex_);
  if (args.size() != k.num_args())
    throw InvalidArgument("kernel " + k.name() + " takes " + std::to_string(k.num_args()) + " arguments, launched with " +
                          std::to_string(args.size()));
  for (cl_uint i = 0; i < args.size(); ++i) {
    const clc::Arg& a = args[i];
    switch (a.kind) {
      case clc::Arg::Kind::buffer: {
        cl_mem m = mem_of(*a.buffer);
        set_raw(k, i, sizeof m, &m);
        break;
      }
      case clc::Arg::Kind::local: set_raw(k, i, a.bytes, nullptr); break;
      case clc::Arg::Kind::value: set_raw(k, i, a.bytes, a.data); break;
    }
  }
  check_ranges(k, global, local);
  if (global.count() == 0) return;
  EventHandle event;
  cl_int err = clEnqueueNDRangeKernel(queue_.get(), k.get(), global.dims, nullptr, global.size.data(),
                                      local.size.data(), 0, nullptr, event_slot(event));
  if (err != CL_SUCCESS) fail(err, "clEnqueueNDRangeKernel(" + k.name() + ")");
  if (event) add_event(event.get(), k.name());
}

OpenCLDevice& opencl_device(Device& d) {
  auto* dev = dynamic_cast<OpenCLDevice*>(&d);
  if (!dev) throw DeviceError("expected an OpenCL device, got " + d.info().id());
  return *dev;
}

cl_mem mem_of(const Buffer& b) {
  auto* buf = dynamic_cast<const ClBuffer*>(&b);
  if (!buf) throw DeviceError("expected a buffer of an OpenCL device");
  return buf->mem();
}

}  // namespace ejk::opencl
