#include "ejk/expr.hpp"

#include <cctype>
#include <functional>
#include <set>

#include "ejk/error.hpp"

namespace ejk {

struct Expr::Node {
  enum Kind { number, text_literal, name, unary, binary, call } kind;
  std::int64_t value = 0;
  std::string text;  // identifier, operator or function name
  std::vector<std::shared_ptr<const Node>> kids;
};

namespace {

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
    throw InvalidArgument("constraint '" + std::string(s_) + "' col " + std::to_string(pos_ + 1) + ": " + what);
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
      auto n = std::make_shared<Expr::Node>();
      n->kind = Expr::Node::binary;
      n->text = matched;
      n->kids = {lhs, rhs};
      lhs = n;
    }
  }

  NodePtr unary() {
    for (const char* op : {"!", "-"}) {
      skip();
      if (s_.substr(pos_, 2) == "!=") break;
      if (eat(op)) {
        auto n = std::make_shared<Expr::Node>();
        n->kind = Expr::Node::unary;
        n->text = op;
        n->kids = {unary()};
        return n;
      }
    }
    return atom();
  }

  NodePtr atom() {
    skip();
    if (pos_ >= s_.size()) fail("expression ends early");
    char c = s_[pos_];
    if (c == '(') {
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
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_])))
        v = v * 10 + (s_[pos_++] - '0');
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
        n->kind = Expr::Node::call;
        n->text = id;
        std::vector<NodePtr> kids{binary(0)};
        if (!eat(",")) fail("expected ','");
        kids.push_back(binary(0));
        if (!eat(")")) fail("expected ')'");
        n->kids = std::move(kids);
        return n;
      }
      n->kind = Expr::Node::name;
      n->text = id;
      return n;
    }
    fail("unexpected '" + std::string(1, c) + "'");
  }

  std::string_view s_;
  std::size_t pos_ = 0;
};

[[noreturn]] void eval_fail(const std::string& text, const std::string& what) {
  throw InvalidArgument("constraint '" + text + "': " + what);
}

std::int64_t as_int(const Value& v, const std::string& text) {
  if (auto i = std::get_if<std::int64_t>(&v)) return *i;
  eval_fail(text, "text \"" + std::get<std::string>(v) + "\" used as a number");
}

Value eval_node(const Expr::Node& n, const Vars& vars, const std::string& text) {
  switch (n.kind) {
    case Expr::Node::number: return n.value;
    case Expr::Node::text_literal: return n.text;
    case Expr::Node::name: {
      auto it = vars.find(n.text);
      if (it == vars.end()) eval_fail(text, "unknown name '" + n.text + "'");
      return it->second;
    }
    case Expr::Node::unary: {
      std::int64_t v = as_int(eval_node(*n.kids[0], vars, text), text);
      return n.text == "!" ? std::int64_t{!v} : -v;
    }
    case Expr::Node::call: {
      std::int64_t a = as_int(eval_node(*n.kids[0], vars, text), text);
      std::int64_t b = as_int(eval_node(*n.kids[1], vars, text), text);
      return n.text == "min" ? std::min(a, b) : std::max(a, b);
    }
    case Expr::Node::binary: {
      const std::string& op = n.text;
      Value va = eval_node(*n.kids[0], vars, text);
      if (op == "&&" && !as_int(va, text)) return std::int64_t{0};
      if (op == "||" && as_int(va, text)) return std::int64_t{1};
      Value vb = eval_node(*n.kids[1], vars, text);
      if (op == "==") return std::int64_t{va == vb};
      if (op == "!=") return std::int64_t{va != vb};
      std::int64_t a = as_int(va, text), b = as_int(vb, text);
      if (op == "&&" || op == "||") return std::int64_t{b != 0};
      if (op == "<") return std::int64_t{a < b};
      if (op == "<=") return std::int64_t{a <= b};
      if (op == ">") return std::int64_t{a > b};
      if (op == ">=") return std::int64_t{a >= b};
      if (op == "+") return a + b;
      if (op == "-") return a - b;
      if (op == "*") return a * b;
      if (b == 0) eval_fail(text, "division by zero");
      return op == "/" ? a / b : a % b;
    }
  }
  return std::int64_t{0};
}

}  // namespace

Expr Expr::parse(std::string_view text) {
  Expr e;
  e.text_ = std::string(text);
  e.root_ = Parser(text).parse();
  return e;
}

std::int64_t Expr::eval(const Vars& vars) const { return as_int(eval_node(*root_, vars, text_), text_); }

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
