#include "recipe.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/core.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

namespace ejk::app {
namespace {

// Offset of the first byte that is not well-formed UTF-8 (overlong forms, surrogates and code
// points above U+10FFFF included), or npos.
std::size_t invalid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len;
    std::uint32_t cp, least;
    if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1Fu, least = 0x80;
    else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0Fu, least = 0x800;
    else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07u, least = 0x10000;
    else return i;
    if (s.size() - i < len) return i;
    for (std::size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3Fu);
    }
    if (cp < least || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string_view::npos;
}

// Control characters would reach the terminal raw in error messages and tables.
bool has_control(std::string_view s) {
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F) return true;
  }
  return false;
}

class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  std::string where(const YAML::Mark& m) const {
    // A node without a place of its own (yaml-cpp gives -1) is reported at the file's start.
    return fmt::format("{}:{}:{}", path_, std::max(m.line, 0) + 1, std::max(m.column, 0) + 1);
  }
  std::string where(const YAML::Node& n) const { return where(n.Mark()); }
  [[noreturn]] void fail(const YAML::Node& n, const std::string& what) const {
    throw InvalidArgument(where(n) + ": " + what);
  }

  // Before anything is interpreted: every node is visited once per use (an alias as often as it
  // is used, which is how yaml-cpp expands it), so node count and depth bound all later work.
  // Keys must be unique text and every text valid UTF-8 without control characters.
  void check_tree(const YAML::Node& n, int depth) {
    if (++visited_ > RecipeLimits::max_nodes)
      fail(n, fmt::format("the recipe holds more than {} YAML nodes (an alias counts at every use)",
                          RecipeLimits::max_nodes));
    if (depth > RecipeLimits::max_depth)
      fail(n, fmt::format("nested more than {} levels deep", RecipeLimits::max_depth));
    if (n.IsScalar()) {
      check_text(n);
    } else if (n.IsSequence()) {
      for (const auto& e : n) check_tree(e, depth + 1);
    } else if (n.IsMap()) {
      std::map<std::string, YAML::Mark> seen;
      for (const auto& kv : n) {
        if (!kv.first.IsScalar()) fail(kv.first, std::string("a key must be text, not a ") + kind(kv.first));
        check_text(kv.first);
        auto [it, fresh] = seen.emplace(kv.first.Scalar(), kv.first.Mark());
        if (!fresh) fail(kv.first, "duplicate key '" + kv.first.Scalar() + "' (first at " + where(it->second) + ")");
        ++visited_;
        check_tree(kv.second, depth + 1);
      }
    }
  }

  void keys(const YAML::Node& map, const std::set<std::string>& allowed, const std::string& what) const {
    if (!map.IsMap()) fail(map, what + " must be a mapping, not a " + kind(map));
    for (const auto& kv : map) {
      const std::string& key = kv.first.Scalar();
      if (!allowed.count(key)) {
        std::string list;
        for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
        fail(kv.first, "unknown key '" + key + "' in " + what + " (allowed: " + list + ")");
      }
    }
  }

  std::string text(const YAML::Node& n, const std::string& what) const {
    if (!n.IsScalar()) fail(n, what + " must be text, not a " + kind(n));
    return n.Scalar();
  }

  // Exactly an integer in [min, max]: yaml-cpp reads 4294967297 into an int64 fine, and a cast
  // to int would make it 1.
  std::int64_t integer(const YAML::Node& n, const std::string& what, std::int64_t min, std::int64_t max) const {
    std::int64_t v = 0;
    const std::string range = fmt::format("an integer from {} to {}", min, max);
    if (!n.IsScalar() || !YAML::convert<std::int64_t>::decode(n, v))
      fail(n, what + " must be " + range + ", got " + shown(n));
    if (v < min || v > max) fail(n, what + " must be " + range + ", got " + std::to_string(v));
    return v;
  }

  double number(const YAML::Node& n, const std::string& what, double min, double max) const {
    double v = 0;
    const std::string range = fmt::format("a number from {} to {}", min, max);
    if (!n.IsScalar() || !YAML::convert<double>::decode(n, v) || !std::isfinite(v))
      fail(n, what + " must be " + range + ", got " + shown(n));
    if (v < min || v > max) fail(n, what + " must be " + range + ", got " + n.Scalar());
    return v;
  }

  static const char* kind(const YAML::Node& n) {
    return n.IsMap() ? "mapping" : n.IsSequence() ? "list" : n.IsNull() ? "null" : "scalar";
  }
  static std::string shown(const YAML::Node& n) { return n.IsScalar() ? "'" + n.Scalar() + "'" : std::string("a ") + kind(n); }

  // Options are kernel-specific: scalars keep their YAML type (bool, integer, float, text).
  nlohmann::json json(const YAML::Node& n) const {
    if (n.IsMap()) {
      nlohmann::json j = nlohmann::json::object();
      for (const auto& kv : n) j[kv.first.Scalar()] = json(kv.second);
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
    if (YAML::convert<double>::decode(n, d)) {
      // JSON has no NaN or infinity: such an option would turn into null in the cache key.
      if (!std::isfinite(d)) fail(n, "an option must be a finite number, got '" + s + "'");
      return d;
    }
    return s;
  }

 private:
  void check_text(const YAML::Node& n) const {
    const std::string& s = n.Scalar();
    if (invalid_utf8(s) != std::string_view::npos) fail(n, "text is not valid UTF-8");
    if (has_control(s)) fail(n, "text holds a control character");
  }

  std::string path_;
  std::size_t visited_ = 0;
};

std::size_t values_in(const nlohmann::json& j) {
  std::size_t n = 1;
  if (j.is_structured())
    for (const auto& e : j) n += values_in(e);
  return n;
}

DType dtype_at(const Reader& r, const YAML::Node& n) {
  std::string s = r.text(n, "dtype");
  try {
    return parse_dtype(s);
  } catch (const InvalidArgument&) {
    r.fail(n, "unknown dtype '" + s + "' (allowed: f32, f16, bf16)");
  }
}

// The whole text before YAML sees it: one bad byte is reported where it is.
void check_bytes(const std::string& text, const std::string& path) {
  auto place = [&](std::size_t at) {
    std::size_t line = 1, start = 0;
    for (std::size_t i = 0; i < at; ++i)
      if (text[i] == '\n') ++line, start = i + 1;
    return fmt::format("{}:{}:{}", path, line, at - start + 1);
  };
  if (text.size() > RecipeLimits::max_bytes)
    throw InvalidArgument(fmt::format("{}:1:1: the recipe is {} bytes, more than the limit of {} (1 MiB)", path,
                                      text.size(), RecipeLimits::max_bytes));
  if (auto at = invalid_utf8(text); at != std::string_view::npos)
    throw InvalidArgument(place(at) + ": the recipe is not valid UTF-8 here");
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F)
      throw InvalidArgument(place(i) + fmt::format(": the recipe holds a control character (0x{:02x})", c));
  }
}

// Where each document of a YAML stream starts, without building any node. YAML::LoadAll is not
// used: on some malformed streams yaml-cpp 0.7 yields empty documents forever without reading
// further, so only the first two documents are ever asked for.
struct DocumentStarts : YAML::EventHandler {
  std::optional<YAML::Mark> start;
  void OnDocumentStart(const YAML::Mark& m) override {
    if (!start) start = m;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// auto, cpu, cpu:0, opencl:N, vulkan:N or cuda:N (N up to 9 digits).
bool device_syntax(std::string_view d) {
  if (d == "auto" || d == "cpu" || d == "cpu:0") return true;
  for (std::string_view backend : {"opencl:", "vulkan:", "cuda:"})
    if (d.starts_with(backend)) {
      const auto n = d.substr(backend.size());
      return !n.empty() && n.size() <= 9 && std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; });
    }
  return false;
}

}  // namespace

Recipe parse_recipe(const std::string& text, const std::string& path) {
  check_bytes(text, path);
  Reader r(path);
  YAML::Node root;
  try {
    std::istringstream in(text);
    YAML::Parser parser(in);
    DocumentStarts first, second;
    if (!parser.HandleNextDocument(first))
      throw InvalidArgument(path + ":1:1: the recipe is empty (it needs name and workloads)");
    if (parser.HandleNextDocument(second) && second.start) {
      // A "document" that starts where the first did is yaml-cpp going round in circles.
      if (first.start && second.start->pos <= first.start->pos)
        throw InvalidArgument(r.where(*second.start) + ": YAML syntax error: this is not a YAML document");
      throw InvalidArgument(r.where(*second.start) + ": a recipe is one YAML document, and a second one starts here");
    }
    root = YAML::Load(text);
  } catch (const YAML::DeepRecursion& e) {
    throw InvalidArgument(fmt::format("{}: YAML nested too deeply (more than {} levels)", r.where(e.mark),
                                      RecipeLimits::max_depth));
  } catch (const YAML::Exception& e) {
    throw InvalidArgument(fmt::format("{}: YAML syntax error: {}", r.where(e.mark), e.msg));
  }
  r.check_tree(root, 0);
  if (!root.IsMap()) r.fail(root, "a recipe must be a mapping with name and workloads");
  r.keys(root, {"name", "device", "defaults", "workloads", "tune"}, "the recipe");

  Recipe recipe;
  recipe.path = path;
  if (!root["name"]) throw InvalidArgument(path + ":1:1: the recipe has no 'name'");
  recipe.name = r.text(root["name"], "name");
  if (const auto d = root["device"]) {
    recipe.device = r.text(d, "device");
    if (!device_syntax(recipe.device))
      r.fail(d, "unknown device '" + recipe.device + "' (allowed: auto, cpu, opencl:N, vulkan:N, cuda:N)");
    recipe.device_where = r.where(d);
  }

  DType default_dtype = DType::f32;
  nlohmann::json default_options = nlohmann::json::object();
  if (const auto d = root["defaults"]) {
    r.keys(d, {"dtype", "options"}, "defaults");
    if (d["dtype"]) default_dtype = dtype_at(r, d["dtype"]);
    if (const auto o = d["options"]) {
      // Any key: each workload's kernel checks the options it is given.
      if (!o.IsMap()) r.fail(o, std::string("defaults.options must be a mapping, not a ") + Reader::kind(o));
      default_options = r.json(o);
    }
  }

  if (const auto t = root["tune"]) {
    r.keys(t, {"strategy", "budget", "seed", "constraints"}, "tune");
    if (t["strategy"]) {
      recipe.tune.strategy = r.text(t["strategy"], "tune.strategy");
      static const std::set<std::string> strategies{"exhaustive", "random", "anneal", "model"};
      if (!strategies.count(recipe.tune.strategy))
        r.fail(t["strategy"], "unknown strategy '" + recipe.tune.strategy + "' (allowed: anneal, exhaustive, model, random)");
    }
    if (const auto b = t["budget"]) {
      r.keys(b, {"evals", "seconds", "race"}, "tune.budget");
      if (b["evals"])
        recipe.tune.evals = static_cast<int>(r.integer(b["evals"], "tune.budget.evals", 1, std::numeric_limits<int>::max()));
      if (b["seconds"]) recipe.tune.seconds = r.number(b["seconds"], "tune.budget.seconds", 0, 1e9);
      if (b["race"]) {
        recipe.tune.race = r.number(b["race"], "tune.budget.race", 0, 1e9);
        if (recipe.tune.race > 0 && recipe.tune.race < 1) r.fail(b["race"], "tune.budget.race must be 0 (no race) or at least 1");
      }
    }
    if (t["seed"])
      recipe.tune.seed = static_cast<std::uint64_t>(
          r.integer(t["seed"], "tune.seed", 0, std::numeric_limits<std::int64_t>::max()));
    if (const auto c = t["constraints"]) {
      if (!c.IsSequence()) r.fail(c, "tune.constraints must be a list of expressions");
      for (const auto& e : c) {
        std::string expr = r.text(e, "a constraint");
        try {
          (void)Expr::parse(expr);
        } catch (const InvalidArgument& ex) {
          r.fail(e, ex.what());
        }
        recipe.tune.constraints.push_back(expr);
        recipe.tune.constraint_where.push_back(r.where(e));
      }
    }
  }

  const auto workloads = root["workloads"];
  if (!workloads) throw InvalidArgument(path + ":1:1: the recipe has no 'workloads'");
  if (!workloads.IsSequence() || workloads.size() == 0) r.fail(workloads, "workloads must be a non-empty list");
  Registry& reg = Registry::global();
  std::size_t expanded = 0;
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
    if (const auto o = w["options"]) {
      if (!o.IsMap()) r.fail(o, std::string("options must be a mapping, not a ") + Reader::kind(o));
      const nlohmann::json given = r.json(o);
      for (const auto& [key, v] : given.items()) options[key] = v;
    }
    if (values_in(options) > RecipeLimits::max_option_values)
      r.fail(w["options"] ? w["options"] : w, fmt::format("a workload's options (defaults included) hold more than {} values",
                                                          RecipeLimits::max_option_values));
    if (!w["shape"]) r.fail(w, "a workload needs 'shape'");
    const auto shape = w["shape"];
    if (!shape.IsMap()) r.fail(shape, "shape must be a mapping of size names to integers or lists of integers");
    // Each size is one value or a list; the workload is the cartesian product of the lists.
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> axes;
    std::size_t count = 1;
    for (const auto& kv : shape) {
      const std::string& name = kv.first.Scalar();
      if (std::find(allowed_sizes.begin(), allowed_sizes.end(), name) == allowed_sizes.end()) {
        std::string list;
        for (const auto& a : allowed_sizes) list += (list.empty() ? "" : ", ") + a;
        r.fail(kv.first, "kernel '" + kernel + "' has no size '" + name + "' (allowed: " + list + ")");
      }
      std::vector<std::int64_t> values;
      const std::string what = "size '" + name + "'";
      if (kv.second.IsSequence()) {
        if (kv.second.size() == 0) r.fail(kv.second, what + " has an empty list");
        for (const auto& v : kv.second) values.push_back(r.integer(v, what, 0, max_dim));
      } else {
        values.push_back(r.integer(kv.second, what, 0, max_dim));
      }
      // Counted before anything expands; saturating, so no product can overflow.
      count = std::min(count * values.size(), RecipeLimits::max_workloads + 1);
      axes.emplace_back(name, std::move(values));
    }
    expanded += count;
    if (expanded > RecipeLimits::max_workloads)
      r.fail(w, fmt::format("the recipe's sweeps expand to more than {} workloads", RecipeLimits::max_workloads));
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
        k.validate(wl.invocation);
      } catch (const InvalidArgument& e) {
        r.fail(w, e.what());
      } catch (const nlohmann::json::exception& e) {
        // A kernel that reads an option of the wrong type without checking it first.
        r.fail(w, std::string("an option of the wrong type: ") + e.what());
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
  auto unreadable = [&](const std::string& why) { return IoError("cannot read recipe " + path + ": " + why); };
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw unreadable("it is a folder");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw unreadable(std::strerror(errno));
  // Read no more than one byte past the limit, so a huge file is refused without reading it.
  std::string text(RecipeLimits::max_bytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) throw unreadable(std::strerror(errno));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > RecipeLimits::max_bytes)
    throw InvalidArgument(fmt::format("{}:1:1: the recipe is larger than the limit of {} bytes (1 MiB)", path,
                                      RecipeLimits::max_bytes));
  return parse_recipe(text, path);
}

}  // namespace ejk::app
