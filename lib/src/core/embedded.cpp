#include "core/embedded.hpp"

#include <string>

#include "ejk/error.hpp"

namespace ejk::detail {

const EmbeddedFile& embedded(std::string_view key) {
  for (const EmbeddedFile* f : embedded_files())
    if (key == f->key) return *f;
  throw NotFound("no embedded kernel source '" + std::string(key) + "'");
}

}  // namespace ejk::detail
