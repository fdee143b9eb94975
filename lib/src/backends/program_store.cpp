#include "backends/program_store.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <system_error>

#include "core/sha256.hpp"
#include "ejk/cache.hpp"

namespace ejk {

namespace {

constexpr std::string_view magic = "ejk-program-1\n";

}  // namespace

std::optional<ProgramStore> ProgramStore::open(std::string_view backend, bool by_default) {
  const char* env = std::getenv("EJK_PROGRAM_CACHE");
  const bool on = env && *env ? std::string_view(env) != "0" : by_default;
  if (!on) return std::nullopt;
  try {
    return ProgramStore(default_cache_dir() / "programs" / std::string(backend));
  } catch (const std::exception&) {
    return std::nullopt;  // no folder to place it in: build every time
  }
}

std::filesystem::path ProgramStore::path(std::string_view key) const { return dir_ / (detail::sha256_hex(key) + ".bin"); }

std::optional<std::vector<unsigned char>> ProgramStore::load(std::string_view key) const {
  std::ifstream in(path(key), std::ios::binary);
  if (!in) return std::nullopt;
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // magic, the checksum of the rest as 64 hex digits and a newline, then the bytes.
  const std::size_t head = magic.size() + 65;
  if (all.size() < head || !std::string_view(all).starts_with(magic)) return std::nullopt;
  const std::string_view body = std::string_view(all).substr(head);
  if (std::string_view(all).substr(magic.size(), 64) != detail::sha256_hex(body)) return std::nullopt;
  return std::vector<unsigned char>(body.begin(), body.end());
}

void ProgramStore::store(std::string_view key, std::span<const unsigned char> bytes) const {
  static std::atomic<unsigned> counter{0};
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return;
  const std::filesystem::path final_path = path(key);
  std::filesystem::path tmp = final_path;
  tmp += "." + std::to_string(::getpid()) + "." + std::to_string(counter++) + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return;
    const std::string_view body(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    out << magic << detail::sha256_hex(body) << '\n';
    out.write(body.data(), static_cast<std::streamsize>(body.size()));
    if (!out.flush()) {
      out.close();
      std::filesystem::remove(tmp, ec);
      return;
    }
  }
  std::filesystem::rename(tmp, final_path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

}  // namespace ejk
