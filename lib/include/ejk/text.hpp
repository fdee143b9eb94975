#pragma once
// Text that came from a file (a bundle's device name, a benchmark's name, a cache entry) shown
// to a person: on a terminal, control characters would move the cursor, recolour or retitle it,
// and bidirectional overrides would reorder what is read.
#include <cstddef>
#include <string>
#include <string_view>

#include "ejk/export.hpp"

namespace ejk {

// `s` with control characters (C0, DEL, C1), bidirectional and line-separator controls escaped
// as \n, \x1b, \u202e, invalid UTF-8 bytes as \xff, and cut after `max_bytes` with the length
// of the rest. Newlines are kept when `keep_newlines` (for messages of several lines).
EJK_API std::string printable(std::string_view s, std::size_t max_bytes = 200, bool keep_newlines = false);

}  // namespace ejk
