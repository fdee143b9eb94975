#pragma once
// Exceptions thrown by libejk. apps/ejk maps each to a documented exit code.
#include <stdexcept>
#include <string>

#include "ejk/export.hpp"

namespace ejk {

class EJK_API Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The caller passed something wrong: a shape, a dtype, an option, a device name.
class EJK_API InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A name (kernel, device, cache entry, embedded source) that does not exist.
class EJK_API NotFound : public Error {
 public:
  using Error::Error;
};

// The backend failed: an API call returned an error at run time.
class EJK_API DeviceError : public Error {
 public:
  using Error::Error;
};

// A device program failed to compile or link for a given configuration.
class EJK_API CompileError : public DeviceError {
 public:
  using DeviceError::DeviceError;
};

// A configuration asks for more than the device offers (local memory, workgroup size, ...).
class EJK_API ResourceError : public DeviceError {
 public:
  using DeviceError::DeviceError;
};

// Reading or writing files (caches, bundles, recipes, traces).
class EJK_API IoError : public Error {
 public:
  using Error::Error;
};

// The selector chain could not produce a config (strict mode, no heuristic, ...).
class EJK_API SelectionError : public Error {
 public:
  using Error::Error;
};

}  // namespace ejk
