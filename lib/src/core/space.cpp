#include "ejk/space.hpp"

#include <algorithm>
#include <set>

#include "ejk/error.hpp"

namespace ejk {

ParamSpace& ParamSpace::param(std::string name, std::vector<Value> values, std::string_view when) {
  if (values.empty()) throw InvalidArgument("parameter '" + name + "' has no candidate values");
  for (auto& p : params_)
    if (p.name == name) throw InvalidArgument("parameter '" + name + "' declared twice");
  std::optional<Expr> cond;
  if (!when.empty()) cond = Expr::parse(when);
  params_.push_back({std::move(name), std::move(values), std::move(cond)});
  return *this;
}

ParamSpace& ParamSpace::param(std::string name, std::initializer_list<std::int64_t> values, std::string_view when) {
  std::vector<Value> v(values.begin(), values.end());
  return param(std::move(name), std::move(v), when);
}

ParamSpace& ParamSpace::constraint(std::string_view text) {
  constraints_.push_back(Expr::parse(text));
  return *this;
}

ParamSpace& ParamSpace::bind(const Vars& vars) {
  for (const auto& [k, v] : vars) bound_[k] = v;
  return *this;
}

std::size_t ParamSpace::cardinality() const {
  std::size_t n = 1;
  for (const auto& p : params_) n *= p.values.size();
  return n;
}

namespace {
Vars with_config(const Vars& bound, const Config& c) {
  Vars vars = bound;
  for (const auto& [k, v] : c.values()) vars[k] = v;
  return vars;
}
}  // namespace

const Expr* ParamSpace::violated(const Config& c) const {
  Vars vars = with_config(bound_, c);
  for (const auto& e : constraints_) {
    // Parameters that do not apply to this config (another variant's) have no value: a
    // constraint fails only where the values the config has make it false, so
    // `variant == "a" && x > 1` refuses every other variant, and `x > 1` alone none of them.
    std::set<std::string, std::less<>> absent;
    for (const auto& name : e.names())
      if (!c.has(name) && std::any_of(params_.begin(), params_.end(), [&](const Param& p) { return p.name == name; }))
        absent.insert(name);
    const auto v = e.eval_known(vars, absent);
    if (v && *v == 0) return &e;
  }
  return nullptr;
}

std::string ParamSpace::mismatch(const Config& c) const {
  Vars vars = bound_;
  std::size_t active = 0;
  for (const auto& p : params_) {
    bool on = !p.when || p.when->eval(vars);
    if (!on) {
      if (c.has(p.name)) return "parameter '" + p.name + "' does not apply (" + p.when->text() + " is false)";
      continue;
    }
    auto it = c.values().find(p.name);
    if (it == c.values().end()) return "parameter '" + p.name + "' is missing";
    if (std::find(p.values.begin(), p.values.end(), it->second) == p.values.end())
      return "parameter '" + p.name + "' = " + to_string(it->second) + " is not a candidate value";
    vars[p.name] = it->second;
    ++active;
  }
  if (active != c.values().size()) {
    for (const auto& kv : c.values()) {
      const std::string& k = kv.first;  // a name lambdas can capture (Clang < 16: no bindings)
      bool known = std::any_of(params_.begin(), params_.end(), [&](const Param& p) { return p.name == k; });
      if (!known) return "unknown parameter '" + k + "'";
    }
  }
  if (const Expr* e = violated(c)) return "violates '" + e->text() + "'";
  return "";
}

std::vector<Config> ParamSpace::enumerate() const {
  std::vector<Config> out;
  Config current;
  Vars vars = bound_;
  // Depth-first over parameters in declaration order; a parameter whose condition is false
  // is left out of the config.
  auto rec = [&](auto&& self, std::size_t i) -> void {
    if (i == params_.size()) {
      if (!violated(current)) out.push_back(current);
      return;
    }
    const Param& p = params_[i];
    if (p.when && !p.when->eval(vars)) return self(self, i + 1);
    for (const auto& v : p.values) {
      current.set(p.name, v);
      vars[p.name] = v;
      self(self, i + 1);
    }
    Config trimmed;
    for (const auto& [k, val] : current.values())
      if (k != p.name) trimmed.set(k, val);
    current = std::move(trimmed);
    vars.erase(p.name);
  };
  rec(rec, 0);
  return out;
}

std::string ParamSpace::describe() const {
  std::string out;
  for (const auto& p : params_) {
    out += p.name + ": ";
    if (p.when) out = out.substr(0, out.size() - 2) + " (when " + p.when->text() + "): ";
    for (std::size_t i = 0; i < p.values.size(); ++i) out += (i ? ", " : "") + to_string(p.values[i]);
    out += "\n";
  }
  for (const auto& e : constraints_) out += "where " + e.text() + "\n";
  return out;
}

}  // namespace ejk
