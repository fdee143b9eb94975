#pragma once
// Compiled device programs kept across processes (OpenCL program binaries): one file per key
// under <cache dir>/programs/<backend>/. A file is written whole under a temporary name and
// renamed into place, so concurrent processes never read a partial one; a file whose checksum
// does not match its contents is a miss. Storing is best effort: a full or read-only disk
// costs the next process a build, never a failure.
#include <cstddef>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ejk {

class ProgramStore {
 public:
  explicit ProgramStore(std::filesystem::path dir) : dir_(std::move(dir)) {}

  // The store of `backend` in the persistent cache's folder, or none when EJK_PROGRAM_CACHE is
  // 0, or unset and `by_default` false, or when no cache folder can be placed.
  static std::optional<ProgramStore> open(std::string_view backend, bool by_default);

  // `key` names everything the bytes depend on (device, driver, source, options).
  std::optional<std::vector<unsigned char>> load(std::string_view key) const;
  void store(std::string_view key, std::span<const unsigned char> bytes) const;
  std::filesystem::path path(std::string_view key) const;

 private:
  std::filesystem::path dir_;
};

}  // namespace ejk
