#include "ejk/config.hpp"

#include <algorithm>
#include <limits>

#include "core/json_fields.hpp"
#include "ejk/error.hpp"
#include "ejk/json.hpp"
#include "ejk/text.hpp"

namespace ejk {

std::string to_string(const Value& v) {
  if (auto i = std::get_if<std::int64_t>(&v)) return std::to_string(*i);
  return std::get<std::string>(v);
}

nlohmann::json to_json(const Value& v) {
  if (auto i = std::get_if<std::int64_t>(&v)) return *i;
  return std::get<std::string>(v);
}

Config& Config::set(std::string name, Value v) {
  values_[std::move(name)] = std::move(v);
  return *this;
}

bool Config::has(std::string_view name) const { return values_.find(name) != values_.end(); }

std::int64_t Config::get(std::string_view name) const {
  auto it = values_.find(name);
  if (it == values_.end())
    throw InvalidArgument("config " + canonical() + " has no parameter '" + std::string(name) + "'");
  if (auto i = std::get_if<std::int64_t>(&it->second)) return *i;
  throw InvalidArgument("config parameter '" + std::string(name) + "' is not an integer");
}

std::int64_t Config::get(std::string_view name, std::int64_t fallback) const {
  return has(name) ? get(name) : fallback;
}

const std::string& Config::text(std::string_view name) const {
  auto it = values_.find(name);
  if (it == values_.end())
    throw InvalidArgument("config " + canonical() + " has no parameter '" + std::string(name) + "'");
  if (auto s = std::get_if<std::string>(&it->second)) return *s;
  throw InvalidArgument("config parameter '" + std::string(name) + "' is not text");
}

nlohmann::json Config::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : values_) j[k] = ejk::to_json(v);
  return j;
}

namespace {

bool is_identifier(std::string_view s) {
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  return !s.empty() && s.size() <= 64 && alpha(s[0]) &&
         std::all_of(s.begin(), s.end(), [&](char c) { return alpha(c) || (c >= '0' && c <= '9'); });
}

}  // namespace

// Configs are flat: parameter names (identifiers, as constraints spell them) to integers or
// strings; booleans read as 0 and 1. Anything else is refused, not converted.
Config Config::from_json(const nlohmann::json& j) {
  if (!j.is_object())
    throw InvalidArgument("a config must be an object of parameter names to integers or strings, got " + json_kind(j));
  Config c;
  for (const auto& [k, v] : j.items()) {
    if (!is_identifier(k))
      throw InvalidArgument("config parameter name '" + printable(k, 80) +
                            "' is not an identifier (letters, digits and _, at most 64)");
    try {
      if (v.is_number_integer())
        c.set(k, detail::integer(v, k, std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()));
      else if (v.is_string())
        c.set(k, detail::text(v, k));
      else if (v.is_boolean())
        c.set(k, std::int64_t{v.get<bool>()});
      else
        throw InvalidArgument("'" + k + "' must be an integer or a string, got " + json_kind(v));
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(std::string("config parameter ") + e.what());
    }
  }
  return c;
}

std::string Config::canonical() const { return to_json().dump(); }

}  // namespace ejk
