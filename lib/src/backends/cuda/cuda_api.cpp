#include "backends/cuda/cuda_api.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <vector>

#include "ejk/error.hpp"

namespace ejk::cuda {
namespace {

// A library handle kept for the life of the process: the functions taken from it are used by
// objects that may outlive any scope here.
void* open_library(const std::string& name) { return ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL); }

template <class F>
bool take(void* lib, F& fn, const char* symbol) {
  fn = reinterpret_cast<F>(::dlsym(lib, symbol));
  return fn != nullptr;
}

struct Loaded {
  std::unique_ptr<Driver> driver;
  std::string reason;
};

Loaded load_driver() {
  Loaded out;
  void* lib = open_library("libcuda.so.1");
  if (!lib) {
    out.reason = "libcuda.so.1 not found (no NVIDIA driver)";
    return out;
  }
  auto d = std::make_unique<Driver>();
  std::string missing;
  // The versioned symbols are those cuda.h's macros name (cuMemAlloc is cuMemAlloc_v2).
#define EJK_TAKE(field, symbol) \
  if (!take(lib, d->field, symbol)) missing += std::string(missing.empty() ? "" : ", ") + symbol;
  EJK_TAKE(cuInit, "cuInit")
  EJK_TAKE(cuDriverGetVersion, "cuDriverGetVersion")
  EJK_TAKE(cuGetErrorName, "cuGetErrorName")
  EJK_TAKE(cuGetErrorString, "cuGetErrorString")
  EJK_TAKE(cuDeviceGetCount, "cuDeviceGetCount")
  EJK_TAKE(cuDeviceGet, "cuDeviceGet")
  EJK_TAKE(cuDeviceGetName, "cuDeviceGetName")
  EJK_TAKE(cuDeviceGetAttribute, "cuDeviceGetAttribute")
  EJK_TAKE(cuDeviceTotalMem, "cuDeviceTotalMem_v2")
  EJK_TAKE(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")
  EJK_TAKE(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2")
  EJK_TAKE(cuCtxSetCurrent, "cuCtxSetCurrent")
  EJK_TAKE(cuStreamCreate, "cuStreamCreate")
  EJK_TAKE(cuStreamDestroy, "cuStreamDestroy_v2")
  EJK_TAKE(cuStreamSynchronize, "cuStreamSynchronize")
  EJK_TAKE(cuStreamWaitEvent, "cuStreamWaitEvent")
  EJK_TAKE(cuMemAlloc, "cuMemAlloc_v2")
  EJK_TAKE(cuMemFree, "cuMemFree_v2")
  EJK_TAKE(cuMemHostAlloc, "cuMemHostAlloc")
  EJK_TAKE(cuMemFreeHost, "cuMemFreeHost")
  EJK_TAKE(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2")
  EJK_TAKE(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2")
  EJK_TAKE(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2")
  EJK_TAKE(cuModuleLoadData, "cuModuleLoadData")
  EJK_TAKE(cuModuleUnload, "cuModuleUnload")
  EJK_TAKE(cuModuleGetFunction, "cuModuleGetFunction")
  EJK_TAKE(cuFuncGetAttribute, "cuFuncGetAttribute")
  EJK_TAKE(cuFuncSetAttribute, "cuFuncSetAttribute")
  EJK_TAKE(cuFuncGetParamInfo, "cuFuncGetParamInfo")
  EJK_TAKE(cuLaunchKernelEx, "cuLaunchKernelEx")
  EJK_TAKE(cuEventCreate, "cuEventCreate")
  EJK_TAKE(cuEventDestroy, "cuEventDestroy_v2")
  EJK_TAKE(cuEventRecord, "cuEventRecord")
  EJK_TAKE(cuEventSynchronize, "cuEventSynchronize")
  EJK_TAKE(cuEventQuery, "cuEventQuery")
  EJK_TAKE(cuEventElapsedTime, "cuEventElapsedTime")
  EJK_TAKE(cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled")
  EJK_TAKE(cuMemGetAddressRange, "cuMemGetAddressRange_v2")
  EJK_TAKE(cuIpcGetMemHandle, "cuIpcGetMemHandle")
  EJK_TAKE(cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2")
  EJK_TAKE(cuIpcCloseMemHandle, "cuIpcCloseMemHandle")
  EJK_TAKE(cuIpcGetEventHandle, "cuIpcGetEventHandle")
  EJK_TAKE(cuIpcOpenEventHandle, "cuIpcOpenEventHandle")
#undef EJK_TAKE
  if (!missing.empty()) {
    out.reason = "libcuda.so.1 lacks " + missing + " (a driver older than CUDA 12.4)";
    return out;
  }
  if (CUresult r = d->cuInit(0); r != CUDA_SUCCESS) {
    const char* name = nullptr;
    d->cuGetErrorName(r, &name);
    out.reason = std::string("cuInit failed: ") + (name ? name : "unknown error");
    return out;
  }
  d->cuDriverGetVersion(&d->version);
  out.driver = std::move(d);
  return out;
}

const Loaded& loaded_driver() {
  static const Loaded l = load_driver();
  return l;
}

struct LoadedNvrtc {
  std::unique_ptr<Nvrtc> nvrtc;
  std::string error;
};

LoadedNvrtc load_nvrtc() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("EJK_NVRTC"); env && *env) candidates.emplace_back(env);
  for (const char* name : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}) candidates.emplace_back(name);
  std::vector<std::filesystem::path> folders;
  if (const char* home = std::getenv("CUDA_HOME"); home && *home) folders.emplace_back(home);
  folders.emplace_back("/usr/local/cuda");
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/usr/local", ec))
    if (e.path().filename().string().starts_with("cuda-")) folders.push_back(e.path());
  for (const auto& f : folders)
    for (const char* sub : {"lib64", "lib", "targets/x86_64-linux/lib"})
      for (const char* name : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"})
        candidates.push_back((f / sub / name).string());
#ifdef EJK_NVRTC_BUILT_WITH
  candidates.emplace_back(EJK_NVRTC_BUILT_WITH);
#endif
  LoadedNvrtc out;
  for (const auto& c : candidates) {
    void* lib = open_library(c);
    if (!lib) continue;
    auto n = std::make_unique<Nvrtc>();
    bool ok = take(lib, n->nvrtcVersion, "nvrtcVersion") && take(lib, n->nvrtcGetErrorString, "nvrtcGetErrorString") &&
              take(lib, n->nvrtcCreateProgram, "nvrtcCreateProgram") &&
              take(lib, n->nvrtcDestroyProgram, "nvrtcDestroyProgram") &&
              take(lib, n->nvrtcCompileProgram, "nvrtcCompileProgram") &&
              take(lib, n->nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize") &&
              take(lib, n->nvrtcGetProgramLog, "nvrtcGetProgramLog") && take(lib, n->nvrtcGetCUBINSize, "nvrtcGetCUBINSize") &&
              take(lib, n->nvrtcGetCUBIN, "nvrtcGetCUBIN");
    if (!ok) continue;
    int major = 0, minor = 0;
    n->nvrtcVersion(&major, &minor);
    n->version = std::to_string(major) + "." + std::to_string(minor);
    n->path = c;
    out.nvrtc = std::move(n);
    return out;
  }
  out.error = "NVRTC not found: set EJK_NVRTC to libnvrtc.so's path (looked for libnvrtc.so.13/.12 on the loader's "
              "path, under $CUDA_HOME, /usr/local/cuda and /usr/local/cuda-*)";
  return out;
}

const LoadedNvrtc& loaded_nvrtc() {
  static const LoadedNvrtc l = load_nvrtc();
  return l;
}

}  // namespace

const Driver* driver() { return loaded_driver().driver.get(); }
const std::string& driver_absent_reason() { return loaded_driver().reason; }

const Nvrtc& nvrtc() {
  const auto& l = loaded_nvrtc();
  if (!l.nvrtc) throw DeviceError(l.error);
  return *l.nvrtc;
}

bool nvrtc_available() { return loaded_nvrtc().nvrtc != nullptr; }

void check(CUresult r, std::string_view what) {
  if (r == CUDA_SUCCESS) return;
  const char* name = nullptr;
  const char* text = nullptr;
  if (const Driver* d = driver()) {
    d->cuGetErrorName(r, &name);
    d->cuGetErrorString(r, &text);
  }
  std::string msg = std::string(what) + ": " + (name ? name : "CUDA error " + std::to_string(static_cast<int>(r)));
  if (text) msg += std::string(" (") + text + ")";
  if (r == CUDA_ERROR_OUT_OF_MEMORY || r == CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES) throw ResourceError(msg);
  throw DeviceError(msg);
}

}  // namespace ejk::cuda
