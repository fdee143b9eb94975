#pragma once
// The CUDA driver API and NVRTC, loaded at run time (dlopen), so that ejk builds, installs and
// runs where neither is present: libcuda.so.1 comes with NVIDIA's driver, NVRTC with a CUDA
// toolkit or NVIDIA's nvidia-cuda-nvrtc wheel. Only the headers are needed to build.
#include <memory>
#include <string>
#include <string_view>

#include <cuda.h>
#include <nvrtc.h>

namespace ejk::cuda {

// The driver's entry points ejk uses; null members never occur in a Driver that loaded.
struct Driver {
#define EJK_CU_FN(name) decltype(&::name) name = nullptr;
  EJK_CU_FN(cuInit)
  EJK_CU_FN(cuDriverGetVersion)
  EJK_CU_FN(cuGetErrorName)
  EJK_CU_FN(cuGetErrorString)
  EJK_CU_FN(cuDeviceGetCount)
  EJK_CU_FN(cuDeviceGet)
  EJK_CU_FN(cuDeviceGetName)
  EJK_CU_FN(cuDeviceGetAttribute)
  EJK_CU_FN(cuDeviceTotalMem)
  EJK_CU_FN(cuDevicePrimaryCtxRetain)
  EJK_CU_FN(cuDevicePrimaryCtxRelease)
  EJK_CU_FN(cuCtxSetCurrent)
  EJK_CU_FN(cuStreamCreate)
  EJK_CU_FN(cuStreamDestroy)
  EJK_CU_FN(cuStreamSynchronize)
  EJK_CU_FN(cuStreamWaitEvent)
  EJK_CU_FN(cuMemAlloc)
  EJK_CU_FN(cuMemFree)
  EJK_CU_FN(cuMemHostAlloc)
  EJK_CU_FN(cuMemFreeHost)
  EJK_CU_FN(cuMemcpyHtoDAsync)
  EJK_CU_FN(cuMemcpyDtoHAsync)
  EJK_CU_FN(cuMemcpyDtoDAsync)
  EJK_CU_FN(cuModuleLoadData)
  EJK_CU_FN(cuModuleUnload)
  EJK_CU_FN(cuModuleGetFunction)
  EJK_CU_FN(cuFuncGetAttribute)
  EJK_CU_FN(cuFuncSetAttribute)
  EJK_CU_FN(cuFuncGetParamInfo)
  EJK_CU_FN(cuLaunchKernelEx)
  EJK_CU_FN(cuEventCreate)
  EJK_CU_FN(cuEventDestroy)
  EJK_CU_FN(cuEventRecord)
  EJK_CU_FN(cuEventSynchronize)
  EJK_CU_FN(cuEventQuery)
  EJK_CU_FN(cuEventElapsedTime)
  EJK_CU_FN(cuTensorMapEncodeTiled)
  EJK_CU_FN(cuMemGetAddressRange)
  EJK_CU_FN(cuIpcGetMemHandle)
  EJK_CU_FN(cuIpcOpenMemHandle)
  EJK_CU_FN(cuIpcCloseMemHandle)
  EJK_CU_FN(cuIpcGetEventHandle)
  EJK_CU_FN(cuIpcOpenEventHandle)
#undef EJK_CU_FN
  int version = 0;  // cuDriverGetVersion: 12080 for 12.8
};

struct Nvrtc {
#define EJK_NVRTC_FN(name) decltype(&::name) name = nullptr;
  EJK_NVRTC_FN(nvrtcVersion)
  EJK_NVRTC_FN(nvrtcGetErrorString)
  EJK_NVRTC_FN(nvrtcCreateProgram)
  EJK_NVRTC_FN(nvrtcDestroyProgram)
  EJK_NVRTC_FN(nvrtcCompileProgram)
  EJK_NVRTC_FN(nvrtcGetProgramLogSize)
  EJK_NVRTC_FN(nvrtcGetProgramLog)
  EJK_NVRTC_FN(nvrtcGetCUBINSize)
  EJK_NVRTC_FN(nvrtcGetCUBIN)
#undef EJK_NVRTC_FN
  std::string path;     // the library that was loaded
  std::string version;  // "13.0"
};

// The driver, initialized (cuInit), or null when libcuda.so.1 is absent or has no usable
// device: then the backend lists no devices.
const Driver* driver();
// Why driver() is null, for `ejk devices` and skipped tests ("" when it is not).
const std::string& driver_absent_reason();
// NVRTC, found by $EJK_NVRTC (a file), then the loader's search path, then the usual toolkit
// folders, then the one ejk was built with. Throws DeviceError saying where it looked.
const Nvrtc& nvrtc();
// Whether nvrtc() would succeed.
bool nvrtc_available();

// Throws DeviceError "what: CUDA_ERROR_NAME (description)" unless r is CUDA_SUCCESS.
void check(CUresult r, std::string_view what);

}  // namespace ejk::cuda
