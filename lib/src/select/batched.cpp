// Batched and sharded execution: one selection per device for the per-item invocation, then
// one launch per item. Rows move through host memory because buffers carry no offset and
// devices of different backends share nothing else.
#include "ejk/batched.hpp"

#include <exception>
#include <thread>

#include "ejk/error.hpp"
#include "ejk/executor.hpp"
#include "ejk/kernel.hpp"
#include "ejk/registry.hpp"

namespace ejk {

namespace {

// Copies `count` rows of `row` bytes from src (starting at row src_row) to dst (at dst_row).
void copy_rows(const Tensor& src, std::int64_t src_row, const Tensor& dst, std::int64_t dst_row, std::int64_t count,
               std::size_t row) {
  const std::size_t bytes = row * static_cast<std::size_t>(count);
  if (bytes == 0) return;
  std::vector<std::byte> host(bytes);
  src.device().read(src.buffer(), row * static_cast<std::size_t>(src_row), host.data(), bytes);
  dst.device().write(dst.buffer(), row * static_cast<std::size_t>(dst_row), host.data(), bytes);
}

std::size_t item_bytes(const TensorSpec& item) {
  return static_cast<std::size_t>(numel(item.shape)) * dtype_size(item.dtype);
}

std::vector<Role> roles_of(const std::string& kernel) {
  std::vector<Role> roles;
  for (const auto& a : Registry::global().kernel(kernel).args()) roles.push_back(a.role);
  return roles;
}

bool reads(Role r) { return r != Role::out; }
bool writes(Role r) { return r != Role::in; }

// Rethrows `e` as the same kind of error with `where` in front of its message.
[[noreturn]] void rethrow_at(const std::exception_ptr& e, const std::string& where) {
  try {
    std::rethrow_exception(e);
  } catch (const InvalidArgument& x) {
    throw InvalidArgument(where + ": " + x.what());
  } catch (const NotFound& x) {
    throw NotFound(where + ": " + x.what());
  } catch (const CompileError& x) {
    throw CompileError(where + ": " + x.what());
  } catch (const ResourceError& x) {
    throw ResourceError(where + ": " + x.what());
  } catch (const DeviceError& x) {
    throw DeviceError(where + ": " + x.what());
  } catch (const SelectionError& x) {
    throw SelectionError(where + ": " + x.what());
  } catch (const IoError& x) {
    throw IoError(where + ": " + x.what());
  } catch (const std::exception& x) {
    throw Error(where + ": " + x.what());
  }
}

}  // namespace

std::int64_t batch_size(std::span<const Tensor> args) {
  if (args.empty()) throw InvalidArgument("batched call: no arguments");
  std::int64_t batch = -1;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const Tensor& t = args[i];
    if (!t.defined()) throw InvalidArgument("batched call: argument " + std::to_string(i) + " is an empty tensor");
    if (t.rank() == 0)
      throw InvalidArgument("batched call: argument " + std::to_string(i) + " " + to_string(t.shape()) +
                            " has no leading batch axis");
    if (batch < 0) batch = t.dim(0);
    else if (t.dim(0) != batch)
      throw InvalidArgument("batched call: argument " + std::to_string(i) + " " + to_string(t.shape()) +
                            " has leading axis " + std::to_string(t.dim(0)) + " but argument 0 " +
                            to_string(args[0].shape()) + " has " + std::to_string(batch));
  }
  return batch;
}

Invocation item_invocation(const BatchedCall& call, std::span<const Tensor> args) {
  batch_size(args);
  Invocation inv;
  inv.kernel = call.kernel;
  inv.options = call.options.is_null() ? nlohmann::json::object() : call.options;
  inv.scalars = call.scalars.is_null() ? nlohmann::json::object() : call.scalars;
  for (const auto& t : args) inv.args.push_back({Shape(t.shape().begin() + 1, t.shape().end()), t.dtype()});
  return inv;
}

Selection run_batched(Executor& executor, const BatchedCall& call, std::span<const Tensor> args) {
  const std::int64_t batch = batch_size(args);
  const Invocation item = item_invocation(call, args);
  for (std::size_t i = 0; i < args.size(); ++i)
    if (&args[i].device() != &executor.device())
      throw InvalidArgument(call.kernel + ": batched argument " + std::to_string(i) + " lives on " +
                            args[i].device().info().id() + ", the executor runs on " + executor.device().info().id());
  // The one selection (validation, the chain or the override's space check); the items below
  // only launch the implementation the registry picks for this device.
  Selection sel = executor.select(item, call.config);
  Device& dev = executor.device();
  const Implementation& impl = Registry::global().implementation(item, dev.info());
  if (batch == 1) {
    std::vector<Tensor> views;
    for (std::size_t i = 0; i < args.size(); ++i) views.push_back(args[i].reshaped(item.args[i].shape));
    impl.run(item, sel.config, views, dev);
    return sel;
  }
  const std::vector<Role> roles = roles_of(call.kernel);
  if (roles.size() != args.size())
    throw InvalidArgument(call.kernel + " takes " + std::to_string(roles.size()) + " arguments, got " +
                          std::to_string(args.size()));
  std::vector<Tensor> staged;
  for (const auto& spec : item.args) staged.emplace_back(executor.device_ptr(), spec.shape, spec.dtype);
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::size_t i = 0; i < args.size(); ++i)
      if (reads(roles[i])) copy_rows(args[i], b, staged[i], 0, 1, staged[i].bytes());
    impl.run(item, sel.config, staged, dev);
    for (std::size_t i = 0; i < args.size(); ++i)
      if (writes(roles[i])) copy_rows(staged[i], 0, args[i], b, 1, staged[i].bytes());
  }
  return sel;
}

Selection run_batched(const Context& ctx, const BatchedCall& call, std::span<const Tensor> args) {
  return run_batched(ctx.executor(), call, args);
}

std::vector<DeviceShard> run_sharded(std::span<const Context* const> contexts, const BatchedCall& call,
                               std::span<const Tensor> args) {
  if (contexts.empty()) throw InvalidArgument(call.kernel + ": sharded call without devices");
  for (std::size_t d = 0; d < contexts.size(); ++d) {
    if (!contexts[d]) throw InvalidArgument(call.kernel + ": sharded call: context " + std::to_string(d) + " is null");
    // Implementations keep per-device state (queues, compiled programs) that one thread at a
    // time may use: a device appears once.
    for (std::size_t e = 0; e < d; ++e)
      if (&contexts[e]->device() == &contexts[d]->device())
        throw InvalidArgument(call.kernel + ": sharded call: contexts " + std::to_string(e) + " and " +
                              std::to_string(d) + " both run on " + contexts[d]->device().info().id());
  }
  const std::int64_t batch = batch_size(args);
  const Invocation item = item_invocation(call, args);  // validates the leading axes before anything moves
  const std::vector<Role> roles = roles_of(call.kernel);
  if (roles.size() != args.size())
    throw InvalidArgument(call.kernel + " takes " + std::to_string(roles.size()) + " arguments, got " +
                          std::to_string(args.size()));

  const auto n = static_cast<std::int64_t>(contexts.size());
  std::vector<DeviceShard> shards(contexts.size());
  std::vector<std::vector<Tensor>> local(contexts.size());
  std::int64_t next = 0;
  for (std::int64_t d = 0; d < n; ++d) {
    DeviceShard& s = shards[static_cast<std::size_t>(d)];
    s.device = contexts[static_cast<std::size_t>(d)]->device().info().id();
    s.begin = next;
    s.count = batch / n + (d < batch % n ? 1 : 0);
    next += s.count;
    if (s.count == 0) continue;
    const Context& ctx = *contexts[static_cast<std::size_t>(d)];
    for (std::size_t i = 0; i < args.size(); ++i) {
      Shape shape = item.args[i].shape;
      shape.insert(shape.begin(), s.count);
      Tensor t = ctx.empty(shape, args[i].dtype());
      if (reads(roles[i])) copy_rows(args[i], s.begin, t, 0, s.count, item_bytes(item.args[i]));
      local[static_cast<std::size_t>(d)].push_back(std::move(t));
    }
  }

  std::vector<std::exception_ptr> errors(contexts.size());
  {
    std::vector<std::jthread> threads;
    for (std::size_t d = 0; d < contexts.size(); ++d) {
      if (shards[d].count == 0) continue;
      threads.emplace_back([&, d] {
        try {
          shards[d].selection = run_batched(*contexts[d], call, local[d]);
        } catch (...) {
          errors[d] = std::current_exception();
        }
      });
    }
  }
  for (std::size_t d = 0; d < contexts.size(); ++d)
    if (errors[d]) rethrow_at(errors[d], call.kernel + " on " + shards[d].device);

  for (std::size_t d = 0; d < contexts.size(); ++d) {
    if (shards[d].count == 0) continue;
    for (std::size_t i = 0; i < args.size(); ++i)
      if (writes(roles[i]))
        copy_rows(local[d][i], 0, args[i], shards[d].begin, shards[d].count, item_bytes(item.args[i]));
  }
  return shards;
}

}  // namespace ejk
