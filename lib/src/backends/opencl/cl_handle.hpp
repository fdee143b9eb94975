#pragma once
// Owning wrappers for OpenCL objects: copying retains, destruction releases.
#include <utility>

#include <CL/cl.h>

namespace ejk::opencl {

template <class T, cl_int (*Retain)(T), cl_int (*Release)(T)>
class Handle {
 public:
  Handle() = default;
  // Takes over one reference (what clCreate* returns).
  explicit Handle(T raw) : raw_(raw) {}
  Handle(const Handle& o) : raw_(o.raw_) {
    if (raw_) Retain(raw_);
  }
  Handle(Handle&& o) noexcept : raw_(std::exchange(o.raw_, nullptr)) {}
  Handle& operator=(Handle o) noexcept {
    std::swap(raw_, o.raw_);
    return *this;
  }
  ~Handle() {
    if (raw_) Release(raw_);
  }

  T get() const { return raw_; }
  explicit operator bool() const { return raw_ != nullptr; }
  // For out-parameters of clEnqueue* calls: releases what was held.
  T* out() {
    *this = Handle();
    return &raw_;
  }

 private:
  T raw_ = nullptr;
};

using ContextHandle = Handle<cl_context, clRetainContext, clReleaseContext>;
using QueueHandle = Handle<cl_command_queue, clRetainCommandQueue, clReleaseCommandQueue>;
using MemHandle = Handle<cl_mem, clRetainMemObject, clReleaseMemObject>;
using ProgramHandle = Handle<cl_program, clRetainProgram, clReleaseProgram>;
using KernelHandle = Handle<cl_kernel, clRetainKernel, clReleaseKernel>;
using EventHandle = Handle<cl_event, clRetainEvent, clReleaseEvent>;

}  // namespace ejk::opencl
