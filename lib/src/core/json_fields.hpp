#pragma once
// Typed access to JSON that came from a file: exact types and ranges, with errors that name the
// field (never nlohmann's bare type_error, never an integer silently truncated to fit).
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace ejk::detail {

// `j`'s member `name`; throws InvalidArgument when `j` has none.
const nlohmann::json& member(const nlohmann::json& j, std::string_view name);

// Each throws InvalidArgument "<name> must be ..., got ..." for the wrong type or range.
// Strings: at most `max_bytes`, and no control characters unless `controls`.
std::string text(const nlohmann::json& v, std::string_view name, std::size_t max_bytes = 4096, bool controls = false);
// Integers are exact: 1.5, 1e3 and 2^32+1 into an int are refused, not rounded or wrapped.
std::int64_t integer(const nlohmann::json& v, std::string_view name, std::int64_t lo, std::int64_t hi);
std::uint64_t unsigned_integer(const nlohmann::json& v, std::string_view name);
double number(const nlohmann::json& v, std::string_view name);

// Throws naming the first member of object `j` that `known` does not list.
void only_keys(const nlohmann::json& j, std::initializer_list<std::string_view> known, std::string_view what);

}  // namespace ejk::detail
