#pragma once
// What the harnesses share. A parser may refuse its input only with the ejk error its contract
// names, carrying the place it names (file:line:col, file:line, col); anything else (another
// exception type, a message without its place, a crash, a sanitizer report) is a finding and
// aborts the run so libFuzzer saves the input.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "ejk/dtype.hpp"
#include "ejk/invocation.hpp"
#include "ejk/shape.hpp"

namespace ejk::fuzz {

inline std::string_view text_of(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

[[noreturn]] inline void finding(std::string_view what, std::string_view detail = {}) {
  std::fprintf(stderr, "\n== finding: %.*s\n%.*s\n", static_cast<int>(what.size()), what.data(),
               static_cast<int>(detail.size()), detail.data());
  std::abort();
}

// The refusal must name its place: its message starts with `prefix`, then digits.
inline void require_place(std::string_view message, std::string_view prefix) {
  if (!message.starts_with(prefix) || message.size() == prefix.size() ||
      message[prefix.size()] < '0' || message[prefix.size()] > '9')
    finding("a refusal without its place (expected '" + std::string(prefix) + "<number>...')", message);
}

// An invocation a parser accepted: every dimension non-negative, and every argument's element
// count and bytes within 64 bits (what allocating it computes).
inline void require_sane_sizes(const Invocation& inv) {
  for (const auto& a : inv.args) {
    std::int64_t n = 1, bytes = 0;
    for (auto d : a.shape) {
      if (d < 0) finding("accepted a negative dimension", inv.kernel + " " + to_string(a.shape));
      if (__builtin_mul_overflow(n, d, &n)) finding("accepted sizes whose element count overflows", inv.kernel + " " + to_string(a.shape));
    }
    if (__builtin_mul_overflow(n, static_cast<std::int64_t>(dtype_size(a.dtype)), &bytes))
      finding("accepted sizes whose bytes overflow", inv.kernel + " " + to_string(a.shape));
    (void)numel(a.shape);
  }
}

// For readers that take a path: the input as a file in a private temporary folder, which
// goes away with the process.
class InputFile {
 public:
  explicit InputFile(const std::string& name) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ejk-fuzz-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) finding("cannot create a temporary folder", tmpl);
    dir_ = tmpl;
    path_ = (dir_ / name).string();
  }
  ~InputFile() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::filesystem::path& dir() const { return dir_; }
  const std::string& write(std::string_view bytes) const {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out.flush()) finding("cannot write the input file", path_);
    return path_;
  }

 private:
  std::filesystem::path dir_;
  std::string path_;
};

}  // namespace ejk::fuzz
