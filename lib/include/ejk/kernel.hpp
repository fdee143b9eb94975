#pragma once
// A kernel is defined once (what it computes: arguments, validation, reference, cost) and
// implemented per backend (how: parameter space, heuristic, launch).
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ejk/config.hpp"
#include "ejk/device.hpp"
#include "ejk/export.hpp"
#include "ejk/expr.hpp"
#include "ejk/invocation.hpp"
#include "ejk/space.hpp"
#include "ejk/tensor.hpp"

namespace ejk {

enum class Role : std::uint8_t { in, out, inout };

struct ArgDef {
  std::string name;
  Role role = Role::in;
  bool operator==(const ArgDef&) const = default;
};

using HostArrays = std::vector<std::vector<double>>;

// Elements [first, first + count) of argument `arg` as doubles, as the inputs held them before
// the run (an inout argument's initial contents): what a sampled reference reads.
using ArgReader = std::function<std::vector<double>(std::size_t arg, std::int64_t first, std::int64_t count)>;

// The double reference at some elements of one output argument.
struct SampledOutput {
  std::size_t arg = 0;              // index of an out or inout argument
  std::vector<std::int64_t> index;  // element indices, ascending, distinct
  std::vector<double> value;        // the reference's value at each
};

// `count` distinct positions in [0, n), ascending: 0 and n - 1 always, the others one in each
// stretch between, at a place that varies from stretch to stretch, so a sample does not keep
// landing on the same head or column when several dimensions are flattened together.
EJK_API std::vector<std::int64_t> sample_positions(std::int64_t n, std::int64_t count);

// How one argument's initial contents are made for tuning, `ejk run` and benchmarks.
struct Fill {
  enum class Kind : std::uint8_t {
    uniform,  // floats uniform in [lo, hi) made by fill_uniform (ejk/tensor.hpp)
    values,   // `values`, built on the host: index arrays (lengths, tables, offsets), small
    none,     // not written: outputs, and arguments derive() computes
  };
  Kind kind = Kind::uniform;
  float lo = -1.0f, hi = 1.0f;
  std::vector<double> values;

  static Fill uniform(float lo = -1.0f, float hi = 1.0f) { return {Kind::uniform, lo, hi, {}}; }
  static Fill of(std::vector<double> values) { return {Kind::values, 0, 0, std::move(values)}; }
  static Fill none() { return {Kind::none, 0, 0, {}}; }
};

// Where most kernels' fills() start: nothing for outputs, floats uniform in [-1, 1), zeros for
// integer arguments, which the kernel then replaces with its index arrays.
EJK_API std::vector<Fill> standard_fills(const Invocation& inv, const std::vector<ArgDef>& defs);

class EJK_API Kernel {
 public:
  virtual ~Kernel() = default;
  virtual std::string_view name() const = 0;
  // Bumped by hand when the host side changes meaning; hashed with device sources into version().
  virtual std::string_view host_version() const = 0;
  virtual std::vector<ArgDef> args() const = 0;

  // Throws InvalidArgument naming the argument and its shape before anything launches: the
  // argument count and every shape's bounds (ejk/shape.hpp) are checked here for every kernel,
  // then the kernel's own check() runs on shapes known to be within them.
  void validate(const Invocation& inv) const;
  // Named sizes of an invocation (m, n, k, ...) that constraints and heuristics read.
  virtual Vars vars(const Invocation& inv) const = 0;
  virtual double flops(const Invocation& inv) const = 0;
  // The fewest bytes that must move between memory and the device.
  virtual double bytes(const Invocation& inv) const = 0;
  // Double-precision result: given every argument's values (outputs with their initial
  // contents), returns the final values of the out/inout arguments in order.
  virtual HostArrays reference(const Invocation& inv, const HostArrays& args) const = 0;
  // Relative tolerance for checking an output against the reference.
  virtual double tolerance(const Invocation& inv) const;
  // For problems too large for reference(): the reference at a deterministic sample of output
  // elements (spread over every dimension, first and last rows among them), computed from just
  // the inputs those elements need, read in slices through `read`, so host memory stays
  // O(sample). Empty (the default) when the kernel has none: large problems are then checked
  // against a trusted config's output alone.
  virtual std::vector<SampledOutput> sampled_reference(const Invocation& /*inv*/, const ArgReader& /*read*/) const {
    return {};
  }

  // How each argument's valid random contents are made, in argument order. The default: floats
  // uniform in [-1, 1) for in and inout arguments, nothing for outputs; integer arguments are
  // refused, so kernels with index arguments (lengths, tables) override it.
  virtual std::vector<Fill> fills(const Invocation& inv, std::uint64_t seed) const;
  // Computes the arguments that are functions of others (a backward's forward outputs) on
  // their device, after the fills. The default computes none.
  virtual void derive(const Invocation& /*inv*/, std::span<const Tensor> /*args*/) const {}

  // Writes every argument's contents on its device: fills() then derive(). Uniform argument i
  // gets seed + i * 2^32, so arguments differ and a seed gives the same values on every device.
  // Host memory stays O(index arrays) whatever the tensors' sizes.
  void make_inputs(const Invocation& inv, std::uint64_t seed, std::span<const Tensor> args) const;
  // The same contents as doubles on the host (outputs zero), made on the cpu device: for
  // references and tests at small sizes.
  HostArrays inputs(const Invocation& inv, std::uint64_t seed) const;

  // Recipes describe workloads by named sizes ({m: 1024, n: 4096, k: 4096}); this builds the
  // invocation. Throws InvalidArgument naming a missing or unknown size and the allowed ones.
  virtual Invocation from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                                const nlohmann::json& options) const;
  // The size names from_sizes accepts, required ones first; empty when recipes can't build it.
  virtual std::vector<std::string> size_names() const { return {}; }
  // A realistic workload for this kernel, in from_sizes terms: what `ejk kernels --space`
  // shows when the user gives no sizes. Empty (the default) when the kernel has none to
  // suggest, so the user must name every required size.
  virtual std::map<std::string, std::int64_t> example_sizes() const { return {}; }
  // The smallest workload worth checking an implementation on, in from_sizes terms, and its
  // options: odd lengths, more than one head or group, a grouped-query ratio where the kernel
  // has one. The conformance test runs every implementation on every device on it (and the
  // OpenCL ones under Oclgrind); a kernel without one fails that test.
  virtual std::map<std::string, std::int64_t> smallest_sizes() const { return {}; }
  virtual nlohmann::json smallest_options() const { return nlohmann::json::object(); }

 protected:
  // The kernel's shape, dtype and option checks; validate() calls it.
  virtual void check(const Invocation& inv) const = 0;
};

// The sizes a recipe gave a kernel's from_sizes. Names outside `known`, and values outside 0 to
// max_dim (ejk/shape.hpp), are refused at construction; size(name, fallback) is the given value,
// else the fallback, and a size without one (fallback < 0) is required. Errors name the kernel
// and `list`, the sizes it takes.
class EJK_API RecipeSizes {
 public:
  RecipeSizes(std::string kernel, const std::map<std::string, std::int64_t>& sizes,
              const std::vector<std::string>& known, std::string list);
  std::int64_t operator()(const char* name, std::int64_t fallback) const;

 private:
  std::string kernel_, list_;
  const std::map<std::string, std::int64_t>& sizes_;
};

class EJK_API Implementation {
 public:
  virtual ~Implementation() = default;
  virtual std::string_view kernel() const = 0;
  virtual Backend backend() const = 0;
  virtual int priority() const { return 0; }
  // Must equal the kernel's argument list: checked at registration.
  virtual std::vector<ArgDef> args() const = 0;
  // Keys of embedded device sources (kernels/...): their bytes enter the kernel version.
  virtual std::vector<std::string> sources() const { return {}; }
  virtual bool supports(const Invocation& /*inv*/, const DeviceInfo& /*dev*/) const { return true; }
  virtual ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const = 0;
  virtual Config heuristic(const Invocation& inv, const DeviceInfo& dev) const = 0;
  // Builds what run() would build for this config (programs, pipelines) without launching,
  // so a tuner can compile upcoming candidates on host threads while the device times others.
  // Called from several threads at once and concurrently with run(); may throw what run()
  // would (the tuner ignores it here: run() reports it). The default builds nothing.
  virtual void prepare(const Invocation& /*inv*/, const Config& /*config*/, Device& /*device*/) const {}
  // Launches on `device` (asynchronously where the backend allows). Throws CompileError,
  // ResourceError or DeviceError for configs the device cannot run.
  virtual void run(const Invocation& inv, const Config& config, std::span<const Tensor> args,
                   Device& device) const = 0;
};

// Runs `kernel` on the arguments `from` of another invocation (its options kept), with the
// highest-priority implementation for their device and its heuristic config, never tuning:
// how derive() computes a forward's outputs for a backward. Absent indices (npos) get
// temporaries of the shapes `temporaries` gives, in order.
EJK_API void run_on(std::string_view kernel, const Invocation& inv, std::span<const Tensor> args,
                    std::span<const std::size_t> from, std::span<const TensorSpec> temporaries = {});

// Variables every space may read about the device: local_mem, static_local_mem (for fixed-size
// local arrays: DeviceInfo::static_local()), max_workgroup_size,
// subgroup_size, compute_units, fp16, coopmat (1 when f16 cooperative matrices exist).
EJK_API Vars device_vars(const DeviceInfo& dev);

}  // namespace ejk
