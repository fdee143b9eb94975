#pragma once
// OpenCL status codes turned into ejk exceptions that name the failing call and the code.
#include <string>
#include <string_view>

#include <CL/cl.h>

namespace ejk::opencl {

// "CL_OUT_OF_RESOURCES", or "CL error -9999" for codes this build does not know.
std::string error_name(cl_int code);

// Throws ResourceError for codes that mean "the device has not enough of something" (out of
// resources, host memory, allocation failure, workgroup too large), DeviceError otherwise.
// `what` names the call and, where useful, its subject: "clEnqueueNDRangeKernel(xgemm)".
[[noreturn]] void fail(cl_int code, std::string_view what);

inline void check(cl_int code, std::string_view what) {
  if (code != CL_SUCCESS) fail(code, what);
}

}  // namespace ejk::opencl
