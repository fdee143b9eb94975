#pragma once
// JSON files that ejk reads and writes: bundles, profiles, benchmark results, stored configs.
// What comes from a file is bounded (size and nesting), refuses duplicate keys, and every
// parser error is reported with its source and place; what is written appears whole or not at all.
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "ejk/export.hpp"

namespace ejk {

struct JsonLimits {
  // Larger inputs are refused before they are parsed.
  std::size_t max_bytes = std::size_t{64} << 20;
  // Arrays and objects nested deeper are refused: nlohmann::json dumps, compares and converts
  // recursively, so an unbounded depth is a stack overflow waiting for its first use.
  int max_depth = 64;
};

// Parses `text`. Throws InvalidArgument "<source>:<line>:<col>: ..." for invalid JSON, a number
// out of range (1e400), a duplicate key, nesting deeper than the limit or too many bytes.
// `first_line` is the line of `source` on which `text` starts (a line of a JSON-lines file).
EJK_API nlohmann::json parse_json(std::string_view text, std::string_view source, const JsonLimits& limits = {},
                                  std::size_t first_line = 1);

// Reads and parses a file. Throws IoError naming the path when it cannot be read, and
// InvalidArgument (as parse_json, with the path as source) for what it holds.
EJK_API nlohmann::json read_json_file(const std::filesystem::path& path, const JsonLimits& limits = {});

// What `v` is, for messages: "an object", "an array", "a string", "null", or the value itself
// for numbers and booleans ("got 1.5").
EJK_API std::string json_kind(const nlohmann::json& v);

// Writes `doc` indented to a temporary file beside `path` and renames it over `path`, so a
// reader never sees half a file; the temporary file is removed on any failure. Invalid UTF-8 in
// strings is written as U+FFFD. Throws IoError naming `path` and the system's reason.
EJK_API void write_json_file(const std::filesystem::path& path, const nlohmann::json& doc);
// The same for any text (an HTML report): whole or not at all.
EJK_API void write_text_file(const std::filesystem::path& path, std::string_view text);

}  // namespace ejk
