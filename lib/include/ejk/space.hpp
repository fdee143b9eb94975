#pragma once
// A kernel's tunable parameters for one invocation on one device: candidate values per
// parameter and printable constraints over parameters, invocation and device variables.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ejk/config.hpp"
#include "ejk/export.hpp"
#include "ejk/expr.hpp"

namespace ejk {

struct Param {
  std::string name;
  std::vector<Value> values;
  // The parameter exists only where this holds (it reads parameters declared before it),
  // e.g. the native GEMM's tile sizes only when algo == "native".
  std::optional<Expr> when;
};

class EJK_API ParamSpace {
 public:
  ParamSpace& param(std::string name, std::vector<Value> values, std::string_view when = {});
  ParamSpace& param(std::string name, std::initializer_list<std::int64_t> values, std::string_view when = {});
  ParamSpace& constraint(std::string_view text);
  // Variables (invocation shape, device limits) constraints may read besides the parameters.
  ParamSpace& bind(const Vars& vars);

  const std::vector<Param>& params() const { return params_; }
  const std::vector<Expr>& constraints() const { return constraints_; }
  const Vars& bound() const { return bound_; }

  // Unfiltered size: the product of the number of values of each parameter.
  std::size_t cardinality() const;
  // The constraint a config violates, or nullptr when it satisfies all.
  const Expr* violated(const Config& c) const;
  // Why a config is not in the space ("" when it is): a missing, extra or unknown-valued
  // parameter, or a violated constraint.
  std::string mismatch(const Config& c) const;
  bool admits(const Config& c) const { return mismatch(c).empty(); }
  // Every admitted config, in a deterministic order (parameters in declaration order).
  std::vector<Config> enumerate() const;

  std::string describe() const;  // parameters and constraints, one per line

 private:
  std::vector<Param> params_;
  std::vector<Expr> constraints_;
  Vars bound_;
};

}  // namespace ejk
