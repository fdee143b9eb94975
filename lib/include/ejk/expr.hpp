#pragma once
// Small integer expressions for parameter-space constraints, e.g.
// "tile_m * tile_k * 4 <= local_mem && tile_m % wpt_m == 0". Printable and parsable, so
// spaces can be listed by `ejk kernels --space` and extended from recipes.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ejk/config.hpp"
#include "ejk/export.hpp"

namespace ejk {

// Named values an expression reads: integers (sizes, limits, parameters) or text (a
// parameter such as algo = "native").
using Vars = std::map<std::string, Value, std::less<>>;

// Grammar, C precedence: || && (== !=) (< <= > >=) (+ -) (* / %) unary(! -) atom;
// atoms are integer literals, "text" literals, identifiers, true/false, parenthesised
// expressions, and the functions min(a, b), max(a, b). Text compares only with == and !=.
class EJK_API Expr {
 public:
  // Parentheses, calls and operators nest at most this deep (a chain of binary operators
  // counts one level per operator), so parsing and evaluating never exhaust the stack.
  static constexpr int max_depth = 100;
  static Expr parse(std::string_view text);  // throws InvalidArgument with the column
  // Throws InvalidArgument for unknown names, division by zero and 64-bit overflow.
  std::int64_t eval(const Vars& vars) const;
  // As eval, with the names in `unknown` having no value (parameters a config lacks): `a && b`
  // is 0 where either side is 0 and `a || b` 1 where either side is nonzero, whatever the other;
  // anything else that reads an unknown name has no value (nullopt).
  std::optional<std::int64_t> eval_known(const Vars& vars, const std::set<std::string, std::less<>>& unknown) const;
  const std::string& text() const { return text_; }
  std::vector<std::string> names() const;  // identifiers it reads

  struct Node;

 private:
  std::string text_;
  std::shared_ptr<const Node> root_;
};

}  // namespace ejk
