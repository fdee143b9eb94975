#pragma once
// One call of a kernel, described without its data: shapes, dtypes and static options.
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ejk/export.hpp"
#include "ejk/tensor.hpp"

namespace ejk {

struct EJK_API Invocation {
  std::string kernel;
  std::vector<TensorSpec> args;
  // Static options that change what is computed or how it may be tuned; part of the key.
  nlohmann::json options = nlohmann::json::object();
  // Runtime scalars (alpha, a dropout seed, ...) that never enter the key.
  nlohmann::json scalars = nlohmann::json::object();

  // Canonical text of args and options: the invocation's part of a cache key.
  std::string signature() const;
  nlohmann::json to_json() const;
  static Invocation from_json(const nlohmann::json& j);  // throws InvalidArgument

  // The invocation of the registered kernel `kernel` over `args` (its arguments in the order
  // Kernel::args() names them; an absent optional one is an empty tensor of shape [0]) with
  // `options` (docs/kernels/KERNEL.md lists them) and `scalars`, validated by the kernel: what
  // Executor::run, ejk::tune and a config sweep over Implementation::space take. Throws NotFound
  // for an unknown kernel and InvalidArgument naming the argument and its shape otherwise.
  static Invocation of(std::string_view kernel, std::span<const Tensor> args,
                       nlohmann::json options = nlohmann::json::object(), nlohmann::json scalars = nlohmann::json::object());
};

}  // namespace ejk
