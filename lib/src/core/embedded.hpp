#pragma once
// Kernel sources and SPIR-V embedded at build time (cmake/EjkEmbed.cmake).
#include <cstddef>
#include <span>
#include <string_view>

namespace ejk::detail {

struct EmbeddedFile {
  const char* key;  // path below kernels/, e.g. "matmul/matmul.cl" or "matmul/matmul.spv"
  const unsigned char* data;
  std::size_t size;

  std::string_view text() const { return {reinterpret_cast<const char*>(data), size}; }
};

std::span<const EmbeddedFile* const> embedded_files();

// Throws ejk::NotFound naming the key when it was not embedded.
const EmbeddedFile& embedded(std::string_view key);

}  // namespace ejk::detail
