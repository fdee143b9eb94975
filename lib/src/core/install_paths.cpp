#include "core/install_paths.hpp"

#include <dlfcn.h>
#include <system_error>

namespace ejk::detail {

namespace {

// Its address lies inside libejk, wherever the file was installed or moved to.
const char anchor = 0;

std::filesystem::path below_library(const char* relative) {
  auto dir = library_dir();
  return dir.empty() ? dir : (dir / relative).lexically_normal();
}

}  // namespace

std::filesystem::path library_dir() {
  Dl_info info{};
  if (::dladdr(&anchor, &info) == 0 || info.dli_fname == nullptr) return {};
  std::error_code ec;
  auto file = std::filesystem::weakly_canonical(info.dli_fname, ec);
  return ec ? std::filesystem::path() : file.parent_path();
}

std::filesystem::path installed_profiles_dir() { return below_library(EJK_PROFILES_FROM_LIBDIR); }
std::filesystem::path installed_bin_dir() { return below_library(EJK_BINDIR_FROM_LIBDIR); }

}  // namespace ejk::detail
