#pragma once
// The persistent cache: measured configs per invocation key in SQLite (WAL mode), shared by
// every process of a user. Only measured results enter it, never an override or a heuristic.
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ejk/bundle.hpp"
#include "ejk/ceilings.hpp"
#include "ejk/export.hpp"
#include "ejk/measurement.hpp"

namespace ejk {

// The newest cache schema this build reads and the one it creates.
inline constexpr int cache_schema_version = 1;

// $EJK_CACHE_DIR, else $XDG_CACHE_HOME/ejk, else $HOME/.cache/ejk.
EJK_API std::filesystem::path default_cache_dir();
// default_cache_dir() / "ejk.sqlite".
EJK_API std::filesystem::path default_cache_path();

// One candidate's result as stored, with the key it was measured for.
struct StoredMeasurement {
  std::string key;
  Measurement measurement;
  std::string strategy;
  std::int64_t created_unix = 0;
};

// How merge() treats an entry whose key the cache already has.
enum class Merge {
  faster,     // keep whichever config measured faster
  overwrite,  // the new entry wins
  keep,       // the existing entry wins
};

struct MergeResult {
  int added = 0, replaced = 0, kept = 0;
};

struct CacheVerification {
  bool ok = false;
  std::vector<std::string> problems;  // integrity_check and schema findings
};

// Thread-safe; many processes may use one file at once. Every write is one transaction.
class EJK_API PersistentCache {
 public:
  // Opens `path`, creating its folder and a fresh cache when missing. A damaged file (not
  // SQLite, truncated, failing quick_check) or a foreign one (SQLite without this schema and
  // application id) is reported on stderr with its path and moved aside as
  // <path>.corrupt-<timestamp>, and a fresh cache is created. A cache written by a newer
  // schema is refused with IoError and left untouched.
  explicit PersistentCache(std::filesystem::path path);
  ~PersistentCache();
  PersistentCache(const PersistentCache&) = delete;
  PersistentCache& operator=(const PersistentCache&) = delete;

  const std::filesystem::path& path() const;
  // False when SQLite could open the file only for reading (its permissions or its folder's).
  bool writable() const;
  // Where the damaged or foreign file found at open was moved, if one was.
  const std::optional<std::filesystem::path>& moved_aside() const;

  // Records every measurement and makes `entry` the key's best config (replacing an older
  // one: a newer tune wins, the older measurements stay). `device` is remembered for
  // bundles and its row updated from it. Throws InvalidArgument for an entry that was not
  // measured or whose statistics are not plausible (implausible() in measurement.hpp).
  void put(const CacheEntry& entry, std::span<const Measurement> measurements = {},
           const std::optional<DeviceRecord>& device = {});
  // Merges `entries` (an import) in one transaction: all of them or, on any error, none; each
  // is checked as put() checks it before anything is written. `devices` are recorded only where
  // the cache has no row for their fingerprint: a row is never changed by a merge, so a bundle
  // cannot rename a device (a machine's own rows come from put(), from the device itself).
  // A dry run counts what would happen and writes nothing.
  MergeResult merge(std::span<const CacheEntry> entries, std::span<const DeviceRecord> devices, Merge policy,
                    bool dry_run = false);
  std::optional<CacheEntry> get(std::string_view key) const;
  // Entries sorted by key; only `kernel`'s when it is not empty.
  std::vector<CacheEntry> list(std::string_view kernel = {}) const;
  std::vector<StoredMeasurement> measurements(std::string_view key) const;
  std::optional<DeviceRecord> device(std::string_view fingerprint) const;
  // A device's measured ceilings (ejk/ceilings.hpp), kept by fingerprint (device and driver)
  // beside its entries: put replaces what was measured before and records `device` as put()
  // does. The table is created on the first put, so caches of older builds stay readable by
  // them; ceilings() is nullopt until then.
  void put_ceilings(const DeviceRecord& device, const Ceilings& ceilings);
  std::optional<Ceilings> ceilings(std::string_view fingerprint) const;
  // Removes the entry and its measurements; false when there was no entry.
  bool remove(std::string_view key);
  std::size_t size() const;  // entries
  CacheVerification verify() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ejk
