// Constraint expressions: parse, print (the text and a space's description), list the names
// and evaluate. Input: the expression, then optionally a NUL byte and bytes that give each
// name a value (one byte chooses a kind, then eight bytes of integer or a short text).
#include <cstring>
#include <optional>

#include "ejk/error.hpp"
#include "ejk/expr.hpp"
#include "ejk/space.hpp"
#include "support.hpp"

namespace {

class Values {
 public:
  explicit Values(std::string_view bytes) : bytes_(bytes) {}
  ejk::Value next() {
    const unsigned char kind = take(1).empty() ? 0 : static_cast<unsigned char>(bytes_[pos_ - 1]);
    if (kind % 4 == 3) return std::string(take(kind / 4 % 8));
    std::int64_t v = 0;
    std::string_view b = take(8);
    if (!b.empty()) std::memcpy(&v, b.data(), b.size());
    // Mostly small values, so comparisons and arithmetic both get exercised.
    return kind % 4 == 0 ? v : kind % 4 == 1 ? v % 64 : -(v % 64);
  }

 private:
  std::string_view take(std::size_t n) {
    n = std::min(n, bytes_.size() - pos_);
    std::string_view out = bytes_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  std::string_view bytes_;
  std::size_t pos_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in = ejk::fuzz::text_of(data, size);
  const std::size_t nul = in.find('\0');
  const std::string_view text = in.substr(0, nul);
  std::optional<ejk::Expr> e;
  try {
    e = ejk::Expr::parse(text);
  } catch (const ejk::InvalidArgument& err) {
    if (std::string_view(err.what()).find("col") == std::string_view::npos) ejk::fuzz::finding("a parse error without its column", err.what());
    return 0;
  }
  if (e->text() != text) ejk::fuzz::finding("the printed text differs from the parsed one", e->text());
  // The printed form parses again, to the same names.
  const auto names = e->names();
  if (ejk::Expr::parse(e->text()).names() != names) ejk::fuzz::finding("the printed text reads other names", text);

  Values values(nul == std::string_view::npos ? std::string_view() : in.substr(nul + 1));
  ejk::Vars vars;
  for (const auto& n : names) vars[n] = values.next();
  std::optional<std::int64_t> full;
  try {
    full = e->eval(vars);
  } catch (const ejk::InvalidArgument&) {
    // text used as a number, division by zero
  }
  // With a name unknown, a value is one the known names decide: the same as with any value for it.
  if (!names.empty() && full) {
    try {
      const auto known = e->eval_known(vars, {names.front()});
      if (known && *known != *full) ejk::fuzz::finding("a value decided without a name differs from the full one", text);
    } catch (const ejk::InvalidArgument&) {
    }
  }
  if (!names.empty()) {
    vars.erase(names.front());
    try {
      (void)e->eval(vars);  // short-circuiting may skip the missing name
    } catch (const ejk::InvalidArgument&) {
    }
  }

  // As a space's constraint and as a parameter's condition, and printed back by describe().
  ejk::ParamSpace space;
  space.param("p", {1, 2, 3}, text);
  space.param("q", {std::int64_t{4}, std::string("x")});
  space.constraint(text);
  space.bind(vars);
  try {
    for (const auto& c : space.enumerate()) (void)space.mismatch(c);
  } catch (const ejk::InvalidArgument&) {
  }
  (void)space.describe();
  return 0;
}
