#include "ejk/config.hpp"

#include "ejk/error.hpp"

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

Config Config::from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw InvalidArgument("a config must be a JSON object, got " + j.dump());
  Config c;
  for (const auto& [k, v] : j.items()) {
    if (v.is_number_integer())
      c.set(k, v.get<std::int64_t>());
    else if (v.is_string())
      c.set(k, v.get<std::string>());
    else if (v.is_boolean())
      c.set(k, std::int64_t{v.get<bool>()});
    else
      throw InvalidArgument("config parameter '" + k + "' must be an integer or a string, got " + v.dump());
  }
  return c;
}

std::string Config::canonical() const { return to_json().dump(); }

}  // namespace ejk
