#include "core/json_fields.hpp"

#include <algorithm>
#include <limits>

#include "ejk/error.hpp"
#include "ejk/json.hpp"
#include "ejk/text.hpp"

namespace ejk::detail {

const nlohmann::json& member(const nlohmann::json& j, std::string_view name) {
  if (!j.is_object()) throw InvalidArgument("expected an object with '" + std::string(name) + "', got " + json_kind(j));
  auto it = j.find(name);
  if (it == j.end()) throw InvalidArgument("missing '" + std::string(name) + "'");
  return *it;
}

std::string text(const nlohmann::json& v, std::string_view name, std::size_t max_bytes, bool controls) {
  if (!v.is_string()) throw InvalidArgument("'" + std::string(name) + "' must be a string, got " + json_kind(v));
  const auto& s = v.get_ref<const std::string&>();
  if (s.size() > max_bytes)
    throw InvalidArgument("'" + std::string(name) + "' is " + std::to_string(s.size()) + " bytes long; the limit is " +
                          std::to_string(max_bytes));
  if (!controls && std::any_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }))
    throw InvalidArgument("'" + std::string(name) + "' holds control characters: '" + printable(s) + "'");
  return s;
}

std::int64_t integer(const nlohmann::json& v, std::string_view name, std::int64_t lo, std::int64_t hi) {
  const std::string range = " from " + std::to_string(lo) + " to " + std::to_string(hi);
  if (!v.is_number_integer())
    throw InvalidArgument("'" + std::string(name) + "' must be an integer" + range + ", got " + json_kind(v));
  if (v.is_number_unsigned()) {
    const std::uint64_t u = v.get<std::uint64_t>();
    if (hi >= 0 && u <= static_cast<std::uint64_t>(hi) && (lo <= 0 || u >= static_cast<std::uint64_t>(lo)))
      return static_cast<std::int64_t>(u);
  } else if (const std::int64_t i = v.get<std::int64_t>(); i >= lo && i <= hi) {
    return i;
  }
  throw InvalidArgument("'" + std::string(name) + "' must be an integer" + range + ", got " + v.dump());
}

std::uint64_t unsigned_integer(const nlohmann::json& v, std::string_view name) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0) return static_cast<std::uint64_t>(v.get<std::int64_t>());
  throw InvalidArgument("'" + std::string(name) + "' must be an integer from 0 to " +
                        std::to_string(std::numeric_limits<std::uint64_t>::max()) + ", got " + json_kind(v));
}

double number(const nlohmann::json& v, std::string_view name) {
  if (!v.is_number()) throw InvalidArgument("'" + std::string(name) + "' must be a number, got " + json_kind(v));
  return v.get<double>();
}

void only_keys(const nlohmann::json& j, std::initializer_list<std::string_view> known, std::string_view what) {
  for (const auto& [k, _] : j.items())
    if (std::find(known.begin(), known.end(), k) == known.end())
      throw InvalidArgument("unknown key '" + printable(k, 80) + "' in " + std::string(what));
}

}  // namespace ejk::detail
