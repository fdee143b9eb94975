#pragma once
// Bundles: portable JSON files of measured configs, shipped in profiles/ and moved between
// machines by `ejk export` / `ejk import`. Reading one never executes anything it contains.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ejk/device.hpp"
#include "ejk/export.hpp"
#include "ejk/measurement.hpp"

namespace ejk {

// The newest bundle schema this build reads and the one it writes.
inline constexpr int bundle_schema_version = 1;

// What a bundle (and the persistent cache) remembers about a device, so that profile lookup
// can fall back from the exact device to the same vendor and architecture.
struct EJK_API DeviceRecord {
  std::string fingerprint;
  std::string backend;
  std::string vendor;
  std::string name;
  std::string driver;
  std::string architecture;

  static DeviceRecord of(const DeviceInfo& info);
  nlohmann::json to_json() const;
  static DeviceRecord from_json(const nlohmann::json& j);  // throws InvalidArgument
  bool operator==(const DeviceRecord&) const = default;
};

struct EJK_API Bundle {
  int schema_version = bundle_schema_version;
  std::string tool_version;
  std::int64_t created_unix = 0;
  std::vector<DeviceRecord> devices;  // every fingerprint entries refer to
  std::vector<CacheEntry> entries;

  // An up-to-date bundle of these entries: this tool's version, now, devices as given.
  static Bundle make(std::vector<DeviceRecord> devices, std::vector<CacheEntry> entries);

  // SHA-256 (hex) of the canonical JSON of {"devices": [...], "entries": [...]}, both sorted
  // (devices by fingerprint, entries by key) and dumped compactly with sorted object keys.
  std::string checksum() const;
  nlohmann::json to_json() const;  // includes "sha256"
  // Refuses (InvalidArgument naming `source`) a newer schema, a missing or wrong checksum,
  // malformed entries, and entries whose device is not listed.
  static Bundle from_json(const nlohmann::json& j, std::string_view source = "bundle");
};

// Throws IoError naming the path for unreadable files, invalid JSON and everything
// Bundle::from_json refuses.
EJK_API Bundle read_bundle(const std::filesystem::path& path);
// Writes atomically (a temporary file renamed over the target). Throws IoError.
EJK_API void write_bundle(const std::filesystem::path& path, const Bundle& bundle);

struct BundleCheck {
  bool ok = false;
  std::string message;  // what is wrong, or a one-line summary when ok
};
EJK_API BundleCheck verify_bundle(const std::filesystem::path& path);  // never throws

// Where the profile tier looks for *.json bundles: $EJK_PROFILE_DIR (colon-separated), else
// share/ejk/profiles of the prefix libejk is installed in (in the build tree, the source's
// profiles/ through a link), when it exists.
EJK_API std::vector<std::filesystem::path> default_profile_dirs();

}  // namespace ejk
