#pragma once
// Exceptions thrown by libejk. apps/ejk maps each to a documented exit code.
#include <stdexcept>
#include <string>

namespace ejk {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The caller passed something wrong: a shape, a dtype, an option, a device name.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A name (kernel, device, cache entry, embedded source) that does not exist.
class NotFound : public Error {
 public:
  using Error::Error;
};

// The backend failed: an API call returned an error at run time.
class DeviceError : public Error {
 public:
  using Error::Error;
};

// A device program failed to compile or link for a given configuration.
class CompileError : public DeviceError {
 public:
  using DeviceError::DeviceError;
};

// A configuration asks for more than the device offers (local memory, workgroup size, ...).
class ResourceError : public DeviceError {
 public:
  using DeviceError::DeviceError;
};

// Reading or writing files (caches, bundles, recipes, traces).
class IoError : public Error {
 public:
  using Error::Error;
};

// The selector chain could not produce a config (strict mode, no heuristic, ...).
class SelectionError : public Error {
 public:
  using Error::Error;
};

}  // namespace ejk
