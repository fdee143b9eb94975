#include "recipe.hpp"

#include <fstream>
#include <set>
#include <sstream>

#include <fmt/core.h>
#include <yaml-cpp/yaml.h>

namespace ejk::app {
namespace {

class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  std::string where(const YAML::Node& n) const {
    const auto m = n.Mark();
    return fmt::format("{}:{}:{}", path_, m.line + 1, m.column + 1);
  }
  [[noreturn]] void fail(const YAML::Node& n, const std::string& what) const {
    throw InvalidArgument(where(n) + ": " + what);
  }

  void keys(const YAML::Node& map, const std::set<std::string>& allowed, const std::string& what) const {
    if (!map.IsMap()) fail(map, what + " must be a mapping");
    for (const auto& kv : map) {
      auto key = kv.first.as<std::string>();
      if (!allowed.count(key)) {
        std::string list;
        for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
        fail(kv.first, "unknown key '" + key + "' in " + what + " (allowed: " + list + ")");
      }
    }
  }

  std::string text(const YAML::Node& n, const std::string& what) const {
    if (!n.IsScalar()) fail(n, what + " must be text");
    return n.as<std::string>();
  }

  std::int64_t integer(const YAML::Node& n, const std::string& what, std::int64_t min = 0) const {
    std::int64_t v = 0;
    if (!n.IsScalar() || !YAML::convert<std::int64_t>::decode(n, v))
      fail(n, what + " must be an integer, got '" + (n.IsScalar() ? n.Scalar() : std::string("a ") + kind(n)) + "'");
    if (v < min) fail(n, fmt::format("{} must be at least {}, got {}", what, min, v));
    return v;
  }

  double number(const YAML::Node& n, const std::string& what) const {
    double v = 0;
    if (!n.IsScalar() || !YAML::convert<double>::decode(n, v)) fail(n, what + " must be a number");
    return v;
  }

  static const char* kind(const YAML::Node& n) {
    return n.IsMap() ? "mapping" : n.IsSequence() ? "list" : n.IsNull() ? "null" : "scalar";
  }

  // Options are kernel-specific: scalars keep their YAML type (bool, integer, float, text).
  nlohmann::json json(const YAML::Node& n) const {
    if (n.IsMap()) {
      nlohmann::json j = nlohmann::json::object();
      for (const auto& kv : n) j[kv.first.as<std::string>()] = json(kv.second);
      return j;
    }
    if (n.IsSequence()) {
      nlohmann::json j = nlohmann::json::array();
      for (const auto& e : n) j.push_back(json(e));
      return j;
    }
    if (n.IsNull()) return nullptr;
    const std::string& s = n.Scalar();
    if (n.Tag() == "!") return s;  // quoted: text
    bool b;
    if (YAML::convert<bool>::decode(n, b) && (s == "true" || s == "false")) return b;
    std::int64_t i;
    if (YAML::convert<std::int64_t>::decode(n, i)) return i;
    double d;
    if (YAML::convert<double>::decode(n, d)) return d;
    return s;
  }

 private:
  std::string path_;
};

DType dtype_at(const Reader& r, const YAML::Node& n) {
  std::string s = r.text(n, "dtype");
  try {
    return parse_dtype(s);
  } catch (const InvalidArgument&) {
    r.fail(n, "unknown dtype '" + s + "' (allowed: f32, f16, bf16)");
  }
}

}  // namespace

Recipe parse_recipe(const std::string& text, const std::string& path) {
  Reader r(path);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw InvalidArgument(fmt::format("{}:{}:{}: YAML syntax error: {}", path, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  if (!root.IsMap()) throw InvalidArgument(path + ":1:1: a recipe must be a mapping with name and workloads");
  r.keys(root, {"name", "device", "defaults", "workloads", "tune"}, "the recipe");

  Recipe recipe;
  recipe.path = path;
  if (!root["name"]) throw InvalidArgument(path + ":1:1: the recipe has no 'name'");
  recipe.name = r.text(root["name"], "name");
  if (root["device"]) recipe.device = r.text(root["device"], "device");

  DType default_dtype = DType::f32;
  nlohmann::json default_options = nlohmann::json::object();
  if (auto d = root["defaults"]) {
    r.keys(d, {"dtype", "options"}, "defaults");
    if (d["dtype"]) default_dtype = dtype_at(r, d["dtype"]);
    if (d["options"]) {
      r.keys(d["options"], {}, "defaults.options");  // refuses non-mappings; keys are checked per kernel
      default_options = r.json(d["options"]);
    }
  }

  if (auto t = root["tune"]) {
    r.keys(t, {"strategy", "budget", "seed", "constraints"}, "tune");
    if (t["strategy"]) {
      recipe.tune.strategy = r.text(t["strategy"], "tune.strategy");
      static const std::set<std::string> strategies{"exhaustive", "random", "anneal", "model"};
      if (!strategies.count(recipe.tune.strategy))
        r.fail(t["strategy"], "unknown strategy '" + recipe.tune.strategy + "' (allowed: anneal, exhaustive, model, random)");
    }
    if (auto b = t["budget"]) {
      r.keys(b, {"evals", "seconds"}, "tune.budget");
      if (b["evals"]) recipe.tune.evals = static_cast<int>(r.integer(b["evals"], "tune.budget.evals", 1));
      if (b["seconds"]) recipe.tune.seconds = r.number(b["seconds"], "tune.budget.seconds");
    }
    if (t["seed"]) recipe.tune.seed = static_cast<std::uint64_t>(r.integer(t["seed"], "tune.seed"));
    if (auto c = t["constraints"]) {
      if (!c.IsSequence()) r.fail(c, "tune.constraints must be a list of expressions");
      for (const auto& e : c) {
        std::string expr = r.text(e, "a constraint");
        try {
          (void)Expr::parse(expr);
        } catch (const InvalidArgument& ex) {
          r.fail(e, ex.what());
        }
        recipe.tune.constraints.push_back(expr);
      }
    }
  }

  auto workloads = root["workloads"];
  if (!workloads) throw InvalidArgument(path + ":1:1: the recipe has no 'workloads'");
  if (!workloads.IsSequence() || workloads.size() == 0) r.fail(workloads, "workloads must be a non-empty list");
  Registry& reg = Registry::global();
  for (const auto& w : workloads) {
    r.keys(w, {"kernel", "shape", "dtype", "options"}, "a workload");
    if (!w["kernel"]) r.fail(w, "a workload needs 'kernel'");
    std::string kernel = r.text(w["kernel"], "kernel");
    if (!reg.has(kernel)) {
      std::string known;
      for (const auto& k : reg.kernels()) known += (known.empty() ? "" : ", ") + k;
      r.fail(w["kernel"], "unknown kernel '" + kernel + "' (allowed: " + known + ")");
    }
    const Kernel& k = reg.kernel(kernel);
    auto allowed_sizes = k.size_names();
    if (allowed_sizes.empty()) r.fail(w["kernel"], "kernel '" + kernel + "' cannot be used in recipes");
    DType dtype = w["dtype"] ? dtype_at(r, w["dtype"]) : default_dtype;
    nlohmann::json options = default_options;
    if (w["options"]) {
      if (!w["options"].IsMap()) r.fail(w["options"], "options must be a mapping");
      const nlohmann::json given = r.json(w["options"]);
      for (const auto& [key, v] : given.items()) options[key] = v;
    }
    if (!w["shape"]) r.fail(w, "a workload needs 'shape'");
    auto shape = w["shape"];
    if (!shape.IsMap()) r.fail(shape, "shape must be a mapping of size names to integers or lists of integers");
    // Each size is one value or a list; the workload is the cartesian product of the lists.
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> axes;
    for (const auto& kv : shape) {
      auto name = kv.first.as<std::string>();
      if (std::find(allowed_sizes.begin(), allowed_sizes.end(), name) == allowed_sizes.end()) {
        std::string list;
        for (const auto& a : allowed_sizes) list += (list.empty() ? "" : ", ") + a;
        r.fail(kv.first, "kernel '" + kernel + "' has no size '" + name + "' (allowed: " + list + ")");
      }
      std::vector<std::int64_t> values;
      if (kv.second.IsSequence()) {
        if (kv.second.size() == 0) r.fail(kv.second, "size '" + name + "' has an empty list");
        for (const auto& v : kv.second) values.push_back(r.integer(v, "size '" + name + "'", 0));
      } else {
        values.push_back(r.integer(kv.second, "size '" + name + "'", 0));
      }
      axes.emplace_back(name, std::move(values));
    }
    std::vector<std::size_t> idx(axes.size(), 0);
    for (bool more = true; more;) {
      Workload wl;
      wl.kernel = kernel;
      wl.where = r.where(w);
      wl.dtype = dtype;
      wl.options = options;
      for (std::size_t i = 0; i < axes.size(); ++i) wl.sizes[axes[i].first] = axes[i].second[idx[i]];
      try {
        wl.invocation = k.from_sizes(wl.sizes, dtype, options);
      } catch (const InvalidArgument& e) {
        r.fail(w, e.what());
      }
      recipe.workloads.push_back(std::move(wl));
      more = false;
      for (std::size_t i = axes.size(); i-- > 0;) {
        if (++idx[i] < axes[i].second.size()) {
          more = true;
          break;
        }
        idx[i] = 0;
      }
    }
  }
  return recipe;
}

Recipe load_recipe(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw IoError("cannot read recipe " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_recipe(ss.str(), path);
}

}  // namespace ejk::app
