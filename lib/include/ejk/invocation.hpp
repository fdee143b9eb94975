#pragma once
// One call of a kernel, described without its data: shapes, dtypes and static options.
#include <string>
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
};

}  // namespace ejk
