#include "ejk/expr.hpp"

#include <algorithm>
#include <cctype>
#include <functional>
#include <limits>
#include <set>

#include "ejk/error.hpp"

namespace ejk {

struct Expr::Node {
  enum Kind { number, text_literal, name, unary, binary, call } kind;
  std::int64_t value = 0;
  std::string text;  // identifier, operator or function name
  std::vector<std::shared_ptr<const Node>> kids;
  int depth = 1;  // levels of the tree below and including this node
};

namespace {

// A constraint as errors quote it: long texts are cut, so a message stays readable.
std::string excerpt(std::string_view text) {
  constexpr std::size_t most = 120;
  return text.size() <= most ? std::string(text) : std::string(text.substr(0, most)) + "...";
}

using NodePtr = std::shared_ptr<const Expr::Node>;

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  NodePtr parse() {
    NodePtr n = binary(0);
    skip();
    if (pos_ != s_.size()) fail("unexpected '" + std::string(s_.substr(pos_, 1)) + "'");
    return n;
  }

 private:
  // Binary operators by precedence level, lowest first.
  static constexpr const char* levels[][4] = {
      {"||", nullptr}, {"&&", nullptr}, {"==", "!=", nullptr}, {"<=", ">=", "<", ">"},
      {"+", "-", nullptr}, {"*", "/", "%", nullptr}};
  static constexpr int nlevels = 6;

  [[noreturn]] void fail(const std::string& what) const {
    throw InvalidArgument("constraint '" + excerpt(s_) + "' col " + std::to_string(pos_ + 1) + ": " + what);
  }
  // Parsing recurses into parentheses, calls and unary operators, and evaluating recurses into
  // the tree (chains of binary operators included): both are bounded, so no text can exhaust
  // the stack.
  struct Nested {
    explicit Nested(Parser& p) : p_(p) {
      if (++p_.depth_ > Expr::max_depth) p_.fail("nested more than " + std::to_string(Expr::max_depth) + " levels deep");
    }
    ~Nested() { --p_.depth_; }
    Parser& p_;
  };
  NodePtr branch(Expr::Node::Kind kind, std::string text, std::vector<NodePtr> kids) {
    auto n = std::make_shared<Expr::Node>();
    n->kind = kind;
    n->text = std::move(text);
    for (const auto& k : kids) n->depth = std::max(n->depth, k->depth + 1);
    n->kids = std::move(kids);
    if (n->depth > Expr::max_depth) fail("nested more than " + std::to_string(Expr::max_depth) + " levels deep");
    return n;
  }
  void skip() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool eat(std::string_view tok) {
    skip();
    if (s_.substr(pos_, tok.size()) != tok) return false;
    // "<" must not swallow the first half of "<=", "|" etc. are not operators on their own.
    pos_ += tok.size();
    return true;
  }

  NodePtr binary(int level) {
    if (level == nlevels) return unary();
    NodePtr lhs = binary(level + 1);
    for (;;) {
      const char* matched = nullptr;
      for (const char* op : levels[level]) {
        if (!op) break;
        if (eat(op)) {
          matched = op;
          break;
        }
      }
      if (!matched) return lhs;
      NodePtr rhs = binary(level + 1);
      lhs = branch(Expr::Node::binary, matched, {lhs, rhs});
    }
  }

  NodePtr unary() {
    for (const char* op : {"!", "-"}) {
      skip();
      if (s_.substr(pos_, 2) == "!=") break;
      if (eat(op)) {
        Nested guard(*this);
        return branch(Expr::Node::unary, op, {unary()});
      }
    }
    return atom();
  }

  NodePtr atom() {
    skip();
    if (pos_ >= s_.size()) fail("expression ends early");
    char c = s_[pos_];
    if (c == '(') {
      Nested guard(*this);
      ++pos_;
      NodePtr n = binary(0);
      if (!eat(")")) fail("expected ')'");
      return n;
    }
    auto n = std::make_shared<Expr::Node>();
    if (c == '"') {
      std::size_t end = s_.find('"', pos_ + 1);
      if (end == std::string_view::npos) fail("unterminated text");
      n->kind = Expr::Node::text_literal;
      n->text = std::string(s_.substr(pos_ + 1, end - pos_ - 1));
      pos_ = end + 1;
      return n;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      std::int64_t v = 0;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
        const int digit = s_[pos_] - '0';
        if (v > (std::numeric_limits<std::int64_t>::max() - digit) / 10) fail("number too large (above 2^63-1)");
        v = v * 10 + digit;
        ++pos_;
      }
      n->kind = Expr::Node::number;
      n->value = v;
      return n;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t start = pos_;
      while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
      std::string id(s_.substr(start, pos_ - start));
      if (id == "true" || id == "false") {
        n->kind = Expr::Node::number;
        n->value = id == "true";
        return n;
      }
      if (eat("(")) {
        if (id != "min" && id != "max") fail("unknown function '" + id + "' (expected min or max)");
        Nested guard(*this);
        std::vector<NodePtr> kids{binary(0)};
        if (!eat(",")) fail("expected ','");
        kids.push_back(binary(0));
        if (!eat(")")) fail("expected ')'");
        return branch(Expr::Node::call, id, std::move(kids));
      }
      n->kind = Expr::Node::name;
      n->text = id;
      return n;
    }
    fail("unexpected '" + std::string(1, c) + "'");
  }

  std::string_view s_;
  std::size_t pos_ = 0;
  int depth_ = 0;
};

[[noreturn]] void eval_fail(const std::string& text, const std::string& what) {
  throw InvalidArgument("constraint '" + excerpt(text) + "': " + what);
}

// Integer arithmetic that refuses to overflow (signed overflow is undefined behaviour).
std::int64_t arith(const std::string& op, std::int64_t a, std::int64_t b, const std::string& text) {
  std::int64_t r = 0;
  bool over = false;
  if (op == "+") over = __builtin_add_overflow(a, b, &r);
  else if (op == "-") over = __builtin_sub_overflow(a, b, &r);
  else if (op == "*") over = __builtin_mul_overflow(a, b, &r);
  else {
    if (b == 0) eval_fail(text, "division by zero");
    if (a == std::numeric_limits<std::int64_t>::min() && b == -1) over = true;
    else r = op == "/" ? a / b : a % b;
  }
  if (over) eval_fail(text, std::to_string(a) + " " + op + " " + std::to_string(b) + " overflows 64 bits");
  return r;
}

std::int64_t as_int(const Value& v, const std::string& text) {
  if (auto i = std::get_if<std::int64_t>(&v)) return *i;
  eval_fail(text, "text \"" + std::get<std::string>(v) + "\" used as a number");
}

// nullopt where the value depends on a name in `unknown` (none when it is null).
using Unknown = std::set<std::string, std::less<>>;
std::optional<Value> eval_node(const Expr::Node& n, const Vars& vars, const Unknown* unknown, const std::string& text) {
  switch (n.kind) {
    case Expr::Node::number: return Value{n.value};
    case Expr::Node::text_literal: return Value{n.text};
    case Expr::Node::name: {
      if (unknown && unknown->count(n.text)) return std::nullopt;
      auto it = vars.find(n.text);
      if (it == vars.end()) eval_fail(text, "unknown name '" + n.text + "'");
      return it->second;
    }
    case Expr::Node::unary: {
      const auto x = eval_node(*n.kids[0], vars, unknown, text);
      if (!x) return std::nullopt;
      const std::int64_t v = as_int(*x, text);
      return Value{n.text == "!" ? std::int64_t{!v} : arith("-", 0, v, text)};
    }
    case Expr::Node::call: {
      const auto x = eval_node(*n.kids[0], vars, unknown, text), y = eval_node(*n.kids[1], vars, unknown, text);
      if (!x || !y) return std::nullopt;
      const std::int64_t a = as_int(*x, text), b = as_int(*y, text);
      return Value{n.text == "min" ? std::min(a, b) : std::max(a, b)};
    }
    case Expr::Node::binary: {
      const std::string& op = n.text;
      const auto va = eval_node(*n.kids[0], vars, unknown, text);
      // A known side decides && (false) and || (true) alone; the other side is read only when
      // it may matter, as C reads it.
      if (op == "&&" || op == "||") {
        const std::int64_t decides = op == "||" ? 1 : 0;
        if (va && (as_int(*va, text) != 0) == (decides != 0)) return Value{decides};
        const auto vb = eval_node(*n.kids[1], vars, unknown, text);
        if (vb && (as_int(*vb, text) != 0) == (decides != 0)) return Value{decides};
        if (!va || !vb) return std::nullopt;
        return Value{1 - decides};
      }
      const auto vb = eval_node(*n.kids[1], vars, unknown, text);
      if (!va || !vb) return std::nullopt;
      if (op == "==") return Value{std::int64_t{*va == *vb}};
      if (op == "!=") return Value{std::int64_t{*va != *vb}};
      const std::int64_t a = as_int(*va, text), b = as_int(*vb, text);
      if (op == "<") return Value{std::int64_t{a < b}};
      if (op == "<=") return Value{std::int64_t{a <= b}};
      if (op == ">") return Value{std::int64_t{a > b}};
      if (op == ">=") return Value{std::int64_t{a >= b}};
      return Value{arith(op, a, b, text)};
    }
  }
  return Value{std::int64_t{0}};
}

}  // namespace

Expr Expr::parse(std::string_view text) {
  Expr e;
  e.text_ = std::string(text);
  e.root_ = Parser(text).parse();
  return e;
}

std::int64_t Expr::eval(const Vars& vars) const { return as_int(*eval_node(*root_, vars, nullptr, text_), text_); }

std::optional<std::int64_t> Expr::eval_known(const Vars& vars, const std::set<std::string, std::less<>>& unknown) const {
  const auto v = eval_node(*root_, vars, &unknown, text_);
  if (!v) return std::nullopt;
  return as_int(*v, text_);
}

std::vector<std::string> Expr::names() const {
  std::set<std::string> out;
  std::function<void(const Node&)> walk = [&](const Node& n) {
    if (n.kind == Node::name) out.insert(n.text);
    for (const auto& k : n.kids) walk(*k);
  };
  walk(*root_);
  return {out.begin(), out.end()};
}

}  // namespace ejk
