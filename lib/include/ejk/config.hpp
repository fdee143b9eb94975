#pragma once
// A configuration: a sorted name -> value map with one canonical JSON form.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "ejk/export.hpp"

namespace ejk {

using Value = std::variant<std::int64_t, std::string>;

EJK_API std::string to_string(const Value& v);
EJK_API nlohmann::json to_json(const Value& v);

class EJK_API Config {
 public:
  Config() = default;
  Config(std::initializer_list<std::pair<const std::string, Value>> values) : values_(values) {}

  Config& set(std::string name, Value v);
  bool has(std::string_view name) const;
  std::int64_t get(std::string_view name) const;  // throws InvalidArgument when absent or not an int
  std::int64_t get(std::string_view name, std::int64_t fallback) const;
  const std::string& text(std::string_view name) const;
  const std::map<std::string, Value, std::less<>>& values() const { return values_; }
  bool empty() const { return values_.empty(); }

  nlohmann::json to_json() const;
  static Config from_json(const nlohmann::json& j);  // throws InvalidArgument
  std::string canonical() const;                      // compact JSON, keys sorted
  bool operator==(const Config&) const = default;
  auto operator<=>(const Config&) const = default;

 private:
  std::map<std::string, Value, std::less<>> values_;
};

}  // namespace ejk
