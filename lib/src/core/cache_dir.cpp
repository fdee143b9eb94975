// The folder every cache of ejk lives in: the persistent cache (select/cache.cpp) and the
// backends' compiled programs (backends/program_store.cpp) both place their files below it, so
// it belongs to core rather than to either of them.
#include <cstdlib>

#include "ejk/cache.hpp"
#include "ejk/error.hpp"

namespace ejk {

namespace fs = std::filesystem;

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

}  // namespace

fs::path default_cache_dir() {
  if (const char* d = env("EJK_CACHE_DIR")) return d;
  if (const char* x = env("XDG_CACHE_HOME")) return fs::path(x) / "ejk";
  if (const char* h = env("HOME")) return fs::path(h) / ".cache" / "ejk";
  throw IoError("cannot place the persistent cache: none of EJK_CACHE_DIR, XDG_CACHE_HOME, HOME is set");
}

}  // namespace ejk
