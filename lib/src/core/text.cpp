#include "ejk/text.hpp"

#include <cstdint>
#include <cstdio>

namespace ejk {

namespace {

// The code point of the UTF-8 sequence at s[i] and its length; length 0 when invalid.
std::pair<std::uint32_t, std::size_t> decode(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) return {c, 1};
  std::size_t len = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 && c < 0xf0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
  if (len == 0 || i + len > s.size()) return {0, 0};
  std::uint32_t cp = c & (0x7f >> len);
  for (std::size_t k = 1; k < len; ++k) {
    if ((b(k) & 0xc0) != 0x80) return {0, 0};
    cp = cp << 6 | (b(k) & 0x3f);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
    return {0, 0};
  return {cp, len};
}

bool is_control(std::uint32_t cp) {
  return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x061c || cp == 0x200e || cp == 0x200f ||
         (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

}  // namespace

std::string printable(std::string_view s, std::size_t max_bytes, bool keep_newlines) {
  std::string out;
  std::size_t i = 0;
  while (i < s.size()) {
    if (out.size() >= max_bytes) {
      out += "... (" + std::to_string(s.size() - i) + " more bytes)";
      break;
    }
    auto [cp, len] = decode(s, i);
    char buf[16];
    if (len == 0) {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(s[i]));
      out += buf;
      ++i;
      continue;
    }
    if (!is_control(cp) || (keep_newlines && (cp == '\n' || cp == '\t'))) {
      out.append(s.substr(i, len));
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\r') {
      out += "\\r";
    } else {
      std::snprintf(buf, sizeof buf, cp < 0x80 ? "\\x%02x" : "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
    }
    i += len;
  }
  return out;
}

}  // namespace ejk
