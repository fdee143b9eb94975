#pragma once
// Batched execution with one selection: any kernel run over a leading batch axis with the
// config selected once for the per-item invocation, on one device (run_batched) or with the
// batch split over several devices of one host, one selection and one thread per device
// (run_sharded). docs/scale-out.md describes both.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ejk/config.hpp"
#include "ejk/context.hpp"
#include "ejk/export.hpp"
#include "ejk/invocation.hpp"
#include "ejk/selection.hpp"
#include "ejk/tensor.hpp"

namespace ejk {

// What each item computes: the kernel, its static options and runtime scalars, and
// optionally a config that replaces the selection (as an override does for one call).
struct BatchedCall {
  std::string kernel;
  nlohmann::json options = nlohmann::json::object();
  nlohmann::json scalars = nlohmann::json::object();
  std::optional<Config> config;
};

// The per-item invocation of batched arguments: each argument's shape without its leading
// axis. Throws InvalidArgument naming the argument when one has no leading axis or when the
// leading axes differ.
EJK_API Invocation item_invocation(const BatchedCall& call, std::span<const Tensor> args);

// The length of the leading axis the arguments share (same checks as item_invocation).
EJK_API std::int64_t batch_size(std::span<const Tensor> args);

// Runs call.kernel once per index b of the leading axis on args[i][b] (every argument on the
// executor's device), with one selection for the per-item invocation made before the first
// item. Out and inout arguments receive each item's result in their row b. Kernels take whole
// buffers, so each item's rows are staged through tensors of the item's shape (device-side
// copies, one item at a time); a batch of one runs on the arguments themselves. Items launch the
// implementation Registry::global() picks for the device. Returns the selection.
EJK_API Selection run_batched(Executor& executor, const BatchedCall& call, std::span<const Tensor> args);
EJK_API Selection run_batched(const Context& ctx, const BatchedCall& call, std::span<const Tensor> args);

// One device's part of a sharded run.
struct DeviceShard {
  std::string device;       // device id, e.g. "opencl:0"
  std::int64_t begin = 0;   // first item of the batch
  std::int64_t count = 0;   // items; 0 when the batch had fewer items than devices
  std::optional<Selection> selection;  // the device's one selection; none for an empty shard
};

// Splits the leading axis of `args` (tensors on any one device) into contiguous shards, one
// per context, as even as possible (the first shards take the remainder). On the calling
// thread each shard's rows are copied to its device; then every device runs run_batched on
// its shard in a thread of its own, with its own selection; then out and inout rows are
// copied back into `args`. An error on any device is rethrown after every thread has ended,
// naming the device; the arguments' out rows are then unspecified.
EJK_API std::vector<DeviceShard> run_sharded(std::span<const Context* const> contexts, const BatchedCall& call,
                                             std::span<const Tensor> args);

}  // namespace ejk
