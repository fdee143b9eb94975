#include "backends/cuda/opencl_c.hpp"

#include <cctype>
#include <regex>

#include "ejk/error.hpp"

namespace ejk::cuda {
namespace {

constexpr char prelude_text[] =
#include "backends/cuda/opencl_c_prelude.inc"
    ;

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Comments blanked (newlines kept), so that the scans below see only code.
std::string without_comments(std::string_view s) {
  std::string out(s);
  for (std::size_t i = 0; i + 1 < out.size(); ++i) {
    if (out[i] == '"') {  // strings (inline assembly) are code
      for (++i; i < out.size() && out[i] != '"'; ++i)
        if (out[i] == '\\') ++i;
    } else if (out[i] == '/' && out[i + 1] == '/') {
      for (; i < out.size() && out[i] != '\n'; ++i)
        if (out[i] != '\\' || i + 1 >= out.size() || out[i + 1] != '\n') out[i] = ' ';
    } else if (out[i] == '/' && out[i + 1] == '*') {
      const std::size_t end = out.find("*/", i + 2);
      const std::size_t stop = end == std::string::npos ? out.size() : end + 2;
      for (; i < stop; ++i)
        if (out[i] != '\n') out[i] = ' ';
      --i;
    }
  }
  return out;
}

// Whether `word` starts at i as a whole identifier.
bool word_at(const std::string& s, std::size_t i, std::string_view word) {
  return s.compare(i, word.size(), word) == 0 && (i == 0 || !ident_char(s[i - 1])) &&
         (i + word.size() >= s.size() || !ident_char(s[i + word.size()]));
}

// __global dropped; __local dropped where it qualifies a pointer (a parameter, a cast, a pointer
// variable), __shared__ where it declares an array or a variable.
std::string rewrite_qualifiers(const std::string& s) {
  std::string out;
  out.reserve(s.size() + s.size() / 16);
  int depth = 0;
  for (std::size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (c == '(') ++depth;
    if (c == ')') depth = depth > 0 ? depth - 1 : 0;
    if (c == '_' && word_at(s, i, "__global")) {
      i += 8;
      continue;
    }
    if (c == '_' && word_at(s, i, "__local")) {
      bool pointer = depth > 0;
      if (!pointer) {
        for (std::size_t j = i + 7; j < s.size(); ++j) {
          const char d = s[j];
          if (d == '*') {
            pointer = true;
            break;
          }
          if (d == ';' || d == '=' || d == '[' || d == '(' || d == ',' || d == ')') break;
        }
      }
      if (!pointer) out += "__shared__";
      i += 7;
      continue;
    }
    out += c;
    ++i;
  }
  return out;
}

}  // namespace

std::string_view opencl_c_prelude() { return prelude_text; }

Translated translate_opencl_c(std::string_view source) {
  Translated t;
  std::string code = without_comments(source);
  const bool no_contract = code.find("#pragma OPENCL FP_CONTRACT OFF") != std::string::npos;
  code = rewrite_qualifiers(code);
  // "(float4)(" -> "ejk_make_float4(": a C++ cast of a parenthesized list would be the comma
  // operator's last value.
  static const std::regex literal(R"(\(\s*(float|int|uint|ushort)(2|4|8|16)\s*\)\s*\()");
  code = std::regex_replace(code, literal, "ejk_make_$1$2(");
  t.source.reserve(code.size() + 16384);
  t.source += prelude_text;
  t.source += '\n';
  t.source += kDefinesHere;
  t.source += "\n#line 1\n";
  t.source += code;

  t.options = {"-default-device", "-std=c++17", "-w"};
  if (no_contract) t.options.emplace_back("-fmad=false");
  return t;
}

std::vector<std::string> translate_options(std::string_view options) {
  std::vector<std::string> out;
  for (std::size_t pos = 0; pos < options.size();) {
    while (pos < options.size() && std::isspace(static_cast<unsigned char>(options[pos]))) ++pos;
    std::size_t end = pos;
    while (end < options.size() && !std::isspace(static_cast<unsigned char>(options[end]))) ++end;
    const std::string_view opt = options.substr(pos, end - pos);
    pos = end;
    if (opt.empty()) continue;
    if (opt.starts_with("-D") || opt.starts_with("-U")) out.emplace_back(opt);
    else if (opt == "-cl-fast-relaxed-math" || opt == "-cl-unsafe-math-optimizations") out.emplace_back("--use_fast_math");
    else if (opt == "-cl-mad-enable" || opt == "-cl-no-signed-zeros" || opt == "-cl-finite-math-only" ||
             opt.starts_with("-cl-std=") || opt == "-w")
      continue;
    else throw InvalidArgument("OpenCL build option '" + std::string(opt) + "' has no CUDA counterpart");
  }
  return out;
}

}  // namespace ejk::cuda
