#pragma once
// Devices that run kernels written in OpenCL C: the OpenCL backend, and the CUDA backend through
// a compatibility prelude (backends/cuda/opencl_c.cuh). A kernel's opencl.cpp is written against
// this interface once and registered on every such backend (clc::add), so a new backend that
// can compile OpenCL C gets every kernel's GPU code with no kernel edits.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ejk/device.hpp"
#include "ejk/kernel.hpp"
#include "ejk/registry.hpp"
#include "ejk/tensor.hpp"

namespace ejk::clc {

// A __local pointer argument of the given size.
struct LocalBytes {
  std::size_t bytes;
};

// A struct argument passed by value; its OpenCL C declaration must have the same layout (plain
// 4-byte members are laid out alike on both sides).
struct StructArg {
  const void* data;
  std::size_t bytes;
  template <class T>
    requires std::is_trivially_copyable_v<T> && std::is_standard_layout_v<T>
  static StructArg of(const T& value) {
    return {&value, sizeof(T)};
  }
};

// An NDRange of one to three dimensions, in work-items (OpenCL's convention, on every backend).
struct Range {
  // Implicit, so a one-dimensional range is just a number.
  Range(std::size_t x) : size{x, 1, 1}, dims(1) {}  // NOLINT(google-explicit-constructor)
  Range(std::size_t x, std::size_t y) : size{x, y, 1}, dims(2) {}
  Range(std::size_t x, std::size_t y, std::size_t z) : size{x, y, z}, dims(3) {}
  std::size_t count() const { return size[0] * size[1] * size[2]; }
  std::array<std::size_t, 3> size;
  std::uint32_t dims;
};

// One launch argument as the backend receives it.
struct Arg {
  enum class Kind : std::uint8_t { buffer, local, value };
  Kind kind = Kind::value;
  const Buffer* buffer = nullptr;  // kind buffer
  std::size_t bytes = 0;           // kind local: the size asked for; kind value: the value's size
  const void* data = nullptr;      // kind value
};

// A compiled kernel, shared by every caller that asks for the same (program, name).
class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual const std::string& name() const = 0;
  // The largest workgroup this kernel can launch with on its device (registers included).
  virtual std::size_t max_workgroup_size() const = 0;
  // Local memory the kernel declares statically, in bytes.
  virtual std::uint64_t local_mem() const = 0;
};

class Device : public ejk::Device {
 public:
  // Kernel `name` of the embedded source `source_key` ("matmul/matmul.cl") built with
  // `options` ("-DMWG=64 ..."). The source may `#include "file"` other embedded files of its
  // folder or below kernels/ (with_includes). Throws CompileError carrying the build log, and
  // NotFound for an unknown source key or kernel name.
  virtual std::shared_ptr<Kernel> kernel(std::string_view source_key, std::string_view options,
                                         std::string_view name) = 0;
  // Single-precision fma() runs in hardware (not emulated): kernels may use it in inner loops;
  // otherwise mad() is the fast choice.
  virtual bool hardware_fma() const = 0;
  // A reduction on the device (kernels/common/difference.cl): a few bytes a group come back.
  Difference difference(const Buffer& got, const Buffer* want, DType t, std::int64_t n) override;

  // Sets the arguments in order (buffers, tensors, LocalBytes, StructArg, or arithmetic values
  // whose C++ type must match the kernel parameter's) and enqueues. Throws ResourceError when
  // the local range exceeds what the kernel can launch with, DeviceError for other refusals.
  template <class... Args>
  void launch(Kernel& k, const Range& global, const Range& local, const Args&... args) {
    const std::array<Arg, sizeof...(Args)> packed{arg(args)...};
    launch_args(k, global, local, packed);
  }

 protected:
  // Whole blocks by kernels/common/fill.cl.
  void fill_blocks(Buffer& dst, DType t, std::int64_t first, std::int64_t count, std::uint64_t seed, float lo,
                   float hi) override;
  virtual void launch_args(Kernel& k, const Range& global, const Range& local, std::span<const Arg> args) = 0;
  // Throws InvalidArgument or ResourceError for ranges no backend can launch: dimensions that
  // differ, a local size of 0 or not dividing the global one, or one over the kernel's or the
  // device's limit.
  void check_ranges(const Kernel& k, const Range& global, const Range& local) const;

 private:
  static Arg arg(const Buffer& b) { return {Arg::Kind::buffer, &b, 0, nullptr}; }
  static Arg arg(const Tensor& t) { return arg(t.buffer()); }
  static Arg arg(LocalBytes l) { return {Arg::Kind::local, nullptr, l.bytes, nullptr}; }
  static Arg arg(StructArg s) { return {Arg::Kind::value, nullptr, s.bytes, s.data}; }
  template <class T>
    requires std::is_arithmetic_v<T>
  static Arg arg(const T& value) {
    static_assert(!std::is_same_v<T, bool>, "bool has no fixed OpenCL size: pass an int");
    return {Arg::Kind::value, nullptr, sizeof(T), &value};
  }
};

// The OpenCL C device behind a Device reference; throws DeviceError naming the device when its
// backend does not run OpenCL C.
Device& clc_device(ejk::Device& d);

// Whether `info` is a device whose OpenCL C runs on CPU cores (PoCL): such devices want other
// parameter spaces than GPUs.
bool is_cpu(const DeviceInfo& info);

// `text` (embedded as `key`) with each line `#include "name"` that names an embedded file of
// key's folder, or one below kernels/ ("common/philox.h"), replaced by that file's text (itself
// expanded), followed by a #line directive so build logs keep the including file's line numbers.
// Other includes stay for the compiler.
std::string with_includes(std::string_view key, std::string_view text);

// The OpenCL C prelude (kernels/common/clc.h: storage codecs, the __local argument): a source
// that includes it lists it among its Implementation::sources(), so that an edit to it changes
// the kernel's version.
inline constexpr const char* prelude_source = "common/clc.h";
// NVIDIA's tensor cores, ldmatrix and cp.async from OpenCL C (kernels/common/clc_mma.h), listed
// the same way by the sources that include it.
inline constexpr const char* mma_source = "common/clc_mma.h";

// The backends compiled in whose devices are clc::Devices, in Backend order.
std::vector<Backend> backends();

// The base of an implementation written in OpenCL C: one instance per backend that runs it.
class Implementation : public ejk::Implementation {
 public:
  explicit Implementation(Backend backend) : backend_(backend) {}
  Backend backend() const final { return backend_; }

 private:
  Backend backend_;
};

// Registers an instance of T, made from (backend, extra...), on every backend of backends().
template <class T, class... Extra>
void add(Registry& r, const Extra&... extra) {
  for (Backend b : backends()) r.add(std::make_shared<T>(b, extra...));
}

}  // namespace ejk::clc
