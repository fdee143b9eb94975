// The persistent cache: SQLite in WAL mode, one transaction per write, a randomized short
// busy wait so that many processes can take turns writing, and damaged or foreign files
// moved aside (never emptied in place).
#include "ejk/cache.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "ejk/error.hpp"
#include "ejk/json.hpp"
#include "ejk/text.hpp"
#include "select/sqlite.hpp"

namespace ejk {

namespace fs = std::filesystem;

namespace {

// "EJKC": tells our caches apart from any other SQLite file.
constexpr std::int32_t application_id = 0x454a4b43;
constexpr const char* required_tables[] = {"schema_version", "devices", "entries", "measurements"};

std::int64_t now_unix() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string utc_stamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

struct Busy {
  std::chrono::steady_clock::time_point start;
  std::uint64_t rng = 0;
};

// SQLite's default busy handler backs off to 100 ms sleeps, which starves writers when
// many processes take turns holding the lock for well under a millisecond. Short random
// sleeps keep the lock busy; the deadline still bounds the wait.
int busy_wait(void* p, int count) {
  auto* b = static_cast<Busy*>(p);
  auto now = std::chrono::steady_clock::now();
  if (count == 0) b->start = now;
  if (now - b->start > std::chrono::seconds(30)) return 0;
  b->rng = b->rng * 6364136223846793005ull + 1442695040888963407ull;
  auto span = count < 50 ? 200u : 2000u;
  std::this_thread::sleep_for(std::chrono::microseconds(20 + (b->rng >> 33) % span));
  return 1;
}

// "" when the file may be opened by SQLite; otherwise why it is not an SQLite database.
std::string raw_check(const fs::path& path) {
  std::error_code ec;
  auto size = fs::file_size(path, ec);
  if (ec || size == 0) return "";  // missing or empty: SQLite starts a fresh database
  std::ifstream in(path, std::ios::binary);
  std::array<char, 16> magic{};
  in.read(magic.data(), magic.size());
  if (in.gcount() < 16 || std::string_view(magic.data(), 16) != std::string_view("SQLite format 3\0", 16))
    return "not an SQLite database";
  if (size < 512) return "truncated (" + std::to_string(size) + " bytes)";
  return "";
}

struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
  bool exists = false;
  bool operator==(const FileId&) const = default;
};

FileId file_id(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return {};
  return {st.st_dev, st.st_ino, true};
}

// Holds an flock on <path>.lock: serializes, between processes, opening the cache (its journal
// mode and schema) and moving a damaged file aside.
class FileLock {
 public:
  explicit FileLock(const fs::path& path) {
    fd_ = ::open((path.string() + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0) ::flock(fd_, LOCK_EX);
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

fs::path default_cache_path() { return default_cache_dir() / "ejk.sqlite"; }

struct PersistentCache::Impl {
  fs::path path;
  std::optional<fs::path> moved;
  mutable std::mutex mutex;
  Busy busy;
  sqlite::Db db;

  [[noreturn]] void rethrow(const sqlite::Error& e) const {
    std::string msg = "persistent cache " + path.string() + ": " + e.what();
    if (e.damaged()) msg += " (the file is damaged: `ejk cache verify` reports it; reopening moves it aside)";
    throw sqlite::Error(e.code(), msg);
  }

  void open_db() {
    sqlite3* raw = nullptr;
    int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
    db.reset(raw);
    if (rc != SQLITE_OK) sqlite::fail(raw, rc, "open");
    sqlite3_extended_result_codes(raw, 1);
    busy.rng = static_cast<std::uint64_t>(::getpid()) * 0x9e3779b97f4a7c15ull ^ reinterpret_cast<std::uintptr_t>(this);
    sqlite3_busy_handler(raw, busy_wait, &busy);
    sqlite::Stmt wal(raw, "PRAGMA journal_mode=WAL");
    wal.step();
    // NORMAL in WAL mode: a commit survives a crash of the process (kill -9); only a power
    // loss may drop the last commits, and never corrupts.
    sqlite::exec(raw, "PRAGMA synchronous=NORMAL");
  }

  std::set<std::string> tables() const {
    std::set<std::string> out;
    sqlite::Stmt s(db.get(), "SELECT name FROM sqlite_schema WHERE type = 'table'");
    while (s.step()) out.insert(s.text(0));
    return out;
  }

  std::int64_t app_id() const {
    sqlite::Stmt s(db.get(), "PRAGMA application_id");
    return s.step() ? s.integer(0) : 0;
  }

  void create_schema() {
    sqlite::Transaction t(db.get());
    // Another process may have created it while this one waited for the write lock.
    if (!tables().empty()) return;
    sqlite::exec(db.get(), R"sql(
      CREATE TABLE schema_version (version INTEGER NOT NULL);
      CREATE TABLE devices (
        fingerprint TEXT PRIMARY KEY, backend TEXT NOT NULL, vendor TEXT NOT NULL, name TEXT NOT NULL,
        driver TEXT NOT NULL, architecture TEXT NOT NULL);
      CREATE TABLE entries (
        key TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, kernel TEXT NOT NULL, version TEXT NOT NULL,
        signature TEXT NOT NULL, config TEXT NOT NULL,
        median_ns REAL NOT NULL, iqr_ns REAL NOT NULL, min_ns REAL NOT NULL, samples INTEGER NOT NULL,
        tool_version TEXT NOT NULL, strategy TEXT NOT NULL, host TEXT NOT NULL, created_unix INTEGER NOT NULL,
        evaluations INTEGER NOT NULL, seed INTEGER NOT NULL, updated_unix INTEGER NOT NULL);
      CREATE INDEX entries_kernel ON entries (kernel);
      CREATE TABLE measurements (
        id INTEGER PRIMARY KEY, key TEXT NOT NULL, config TEXT NOT NULL, status TEXT NOT NULL,
        median_ns REAL NOT NULL, iqr_ns REAL NOT NULL, min_ns REAL NOT NULL, samples INTEGER NOT NULL,
        error REAL NOT NULL, message TEXT NOT NULL, strategy TEXT NOT NULL, created_unix INTEGER NOT NULL);
      CREATE INDEX measurements_key ON measurements (key);
    )sql");
    sqlite::Stmt v(db.get(), "INSERT INTO schema_version (version) VALUES (?)");
    v.bind(1, std::int64_t{cache_schema_version}).step();
    sqlite::exec(db.get(), ("PRAGMA application_id = " + std::to_string(application_id)).c_str());
    t.commit();
  }

  // "" when the file is a usable cache; otherwise why it is foreign or damaged. Throws
  // IoError for a newer schema.
  std::string check_schema() {
    for (int round = 0; round < 2; ++round) {
      // One snapshot for both: another process's create_schema commits the tables and the id
      // together, and two reads apart could see the tables without the id (a foreign file).
      sqlite::Transaction snapshot(db.get(), sqlite::Transaction::read);
      const std::int64_t app = app_id();
      const std::set<std::string> names = tables();
      snapshot.commit();
      if (app == 0 && names.empty()) {
        create_schema();
        continue;
      }
      if (app != application_id) {
        std::string list;
        for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
        char id[16];
        std::snprintf(id, sizeof id, "0x%08llx", static_cast<unsigned long long>(app));
        return std::string("not an ejk cache (application_id ") + id + ", tables: " + (list.empty() ? "none" : list) + ")";
      }
      if (!names.count("schema_version")) return "ejk cache without its schema_version table";
      sqlite::Stmt s(db.get(), "SELECT max(version) FROM schema_version");
      std::int64_t version = s.step() ? s.integer(0) : 0;
      if (version > cache_schema_version)
        throw IoError("persistent cache " + path.string() + " has schema version " + std::to_string(version) +
                      "; this ejk " + "reads up to version " + std::to_string(cache_schema_version) +
                      ". Upgrade ejk, or point EJK_CACHE_DIR elsewhere; the file was left untouched");
      if (version < 1) return "ejk cache with an invalid schema version " + std::to_string(version);
      for (const char* t : required_tables)
        if (!names.count(t)) return std::string("ejk cache missing its ") + t + " table";
      sqlite::Stmt q(db.get(), "PRAGMA quick_check");
      std::string first = q.step() ? q.text(0) : "no answer";
      if (first != "ok") return "damaged (quick_check: " + first + ")";
      return "";
    }
    return "schema could not be created";
  }

  // Moves the file examined as `id` aside unless another process already replaced it.
  void move_aside(const FileId& id, const std::string& why) {
    db.reset();
    FileLock lock(path);
    if (!(file_id(path) == id)) return;  // someone else already moved it
    std::string stamp = utc_stamp();
    fs::path aside = path.string() + ".corrupt-" + stamp;
    for (int i = 1; fs::exists(aside); ++i) aside = path.string() + ".corrupt-" + stamp + "-" + std::to_string(i);
    std::error_code ec;
    fs::rename(path, aside, ec);
    if (ec) throw IoError("persistent cache " + path.string() + " is " + why + " and could not be moved aside: " + ec.message());
    // The write-ahead log belongs to the old file: replaying it into a fresh one would corrupt it.
    fs::path wal = path.string() + "-wal";
    if (fs::exists(wal)) fs::rename(wal, aside.string() + "-wal", ec);
    fs::remove(path.string() + "-shm", ec);
    std::fprintf(stderr, "ejk: persistent cache %s is %s; moved it aside to %s and started a fresh cache\n",
                 path.c_str(), why.c_str(), aside.c_str());
    moved = aside;
  }

  void open() {
    std::error_code ec;
    if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
    if (ec) throw IoError("cannot create the cache folder " + path.parent_path().string() + ": " + ec.message());
    for (int attempt = 0; attempt < 4; ++attempt) {
      FileId id = file_id(path);
      std::string why = raw_check(path);
      if (why.empty()) {
        try {
          // One process at a time: switching a fresh file to WAL takes its exclusive lock while
          // holding a shared one, which SQLite refuses at once, past the busy handler, when
          // another process opening the same fresh file holds a shared lock too.
          FileLock lock(path);
          open_db();
          why = check_schema();
          if (why.empty()) return;
        } catch (const sqlite::Error& e) {
          if (!e.damaged()) {
            db.reset();
            rethrow(e);
          }
          why = std::string("damaged (") + e.what() + ")";
        }
      }
      if (!id.exists) id = file_id(path);
      move_aside(id, why);
    }
    throw IoError("persistent cache " + path.string() + " kept coming back damaged; giving up");
  }
};

PersistentCache::PersistentCache(fs::path path) : impl_(std::make_unique<Impl>()) {
  impl_->path = std::move(path);
  impl_->open();
}

PersistentCache::~PersistentCache() = default;

const fs::path& PersistentCache::path() const { return impl_->path; }

bool PersistentCache::writable() const {
  std::lock_guard lock(impl_->mutex);
  return sqlite3_db_readonly(impl_->db.get(), "main") == 0;
}
const std::optional<fs::path>& PersistentCache::moved_aside() const { return impl_->moved; }

namespace {

constexpr const char* entry_columns =
    "key, fingerprint, kernel, version, signature, config, median_ns, iqr_ns, min_ns, samples, tool_version, "
    "strategy, host, created_unix, evaluations, seed";

// A stored config: JSON written by put(), read back with the limits of anything read from a file.
Config stored_config(const sqlite::Stmt& s, int col, const fs::path& path) {
  try {
    return Config::from_json(parse_json(s.text(col), "a config stored in " + path.string()));
  } catch (const InvalidArgument& e) {
    throw IoError(std::string("persistent cache: ") + e.what() + " (`ejk cache rm` removes the entry)");
  }
}

CacheEntry read_entry(const sqlite::Stmt& s, const fs::path& path) {
  CacheEntry e;
  e.fingerprint = s.text(1);
  e.kernel = s.text(2);
  e.version = s.text(3);
  e.signature = s.text(4);
  e.config = stored_config(s, 5, path);
  e.stats = {s.real(6), s.real(7), s.real(8), static_cast<int>(s.integer(9))};
  e.provenance.tool_version = s.text(10);
  e.provenance.strategy = s.text(11);
  e.provenance.host = s.text(12);
  e.provenance.created_unix = s.integer(13);
  e.provenance.evaluations = static_cast<int>(s.integer(14));
  e.provenance.seed = static_cast<std::uint64_t>(s.integer(15));
  return e;
}

// Only measured results enter the cache, with plausible statistics (measurement.hpp).
void check_measured(const CacheEntry& entry) {
  if (std::string why = implausible(entry.stats); !why.empty())
    throw InvalidArgument("only measured results enter the persistent cache: the entry for " + printable(entry.kernel) +
                          " " + printable(entry.signature) + " has " + why);
  if (entry.config.empty())
    throw InvalidArgument("persistent cache: the entry for " + printable(entry.kernel) + " has no config");
}

void write_device(sqlite3* db, const DeviceRecord& device, bool replace) {
  sqlite::Stmt d(db, std::string(R"sql(INSERT INTO devices (fingerprint, backend, vendor, name, driver, architecture)
                                       VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (fingerprint) )sql") +
                         (replace ? R"sql(DO UPDATE SET backend = excluded.backend, vendor = excluded.vendor,
                                         name = excluded.name, driver = excluded.driver,
                                         architecture = excluded.architecture)sql"
                                  : "DO NOTHING"));
  d.bind(1, device.fingerprint).bind(2, device.backend).bind(3, device.vendor).bind(4, device.name);
  d.bind(5, device.driver).bind(6, device.architecture).step();
}

void write_entry(sqlite3* db, const CacheEntry& entry, std::int64_t now) {
  sqlite::Stmt e(db, R"sql(INSERT INTO entries (key, fingerprint, kernel, version, signature, config, median_ns,
                             iqr_ns, min_ns, samples, tool_version, strategy, host, created_unix, evaluations, seed,
                             updated_unix) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                           ON CONFLICT (key) DO UPDATE SET config = excluded.config,
                             median_ns = excluded.median_ns, iqr_ns = excluded.iqr_ns, min_ns = excluded.min_ns,
                             samples = excluded.samples, tool_version = excluded.tool_version,
                             strategy = excluded.strategy, host = excluded.host,
                             created_unix = excluded.created_unix, evaluations = excluded.evaluations,
                             seed = excluded.seed, updated_unix = excluded.updated_unix)sql");
  e.bind(1, entry.key()).bind(2, entry.fingerprint).bind(3, entry.kernel).bind(4, entry.version);
  e.bind(5, entry.signature).bind(6, entry.config.canonical()).bind(7, entry.stats.median_ns);
  e.bind(8, entry.stats.iqr_ns).bind(9, entry.stats.min_ns).bind(10, std::int64_t{entry.stats.n});
  e.bind(11, entry.provenance.tool_version).bind(12, entry.provenance.strategy).bind(13, entry.provenance.host);
  e.bind(14, entry.provenance.created_unix).bind(15, std::int64_t{entry.provenance.evaluations});
  e.bind(16, static_cast<std::int64_t>(entry.provenance.seed)).bind(17, now).step();
}

}  // namespace

void PersistentCache::put(const CacheEntry& entry, std::span<const Measurement> measurements,
                          const std::optional<DeviceRecord>& device) {
  check_measured(entry);
  std::lock_guard lock(impl_->mutex);
  sqlite3* db = impl_->db.get();
  try {
    sqlite::Transaction t(db);
    if (device) write_device(db, *device, true);
    const std::string key = entry.key();
    const std::int64_t now = now_unix();
    if (!measurements.empty()) {
      sqlite::Stmt m(db, R"sql(INSERT INTO measurements (key, config, status, median_ns, iqr_ns, min_ns, samples,
                                 error, message, strategy, created_unix) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?))sql");
      for (const auto& x : measurements) {
        m.bind(1, key).bind(2, x.config.canonical()).bind(3, to_string(x.status)).bind(4, x.stats.median_ns);
        m.bind(5, x.stats.iqr_ns).bind(6, x.stats.min_ns).bind(7, std::int64_t{x.stats.n}).bind(8, x.error);
        m.bind(9, x.message).bind(10, entry.provenance.strategy).bind(11, now);
        m.step();
        m.reset();
      }
    }
    write_entry(db, entry, now);
    t.commit();
  } catch (const sqlite::Error& err) {
    impl_->rethrow(err);
  }
}

MergeResult PersistentCache::merge(std::span<const CacheEntry> entries, std::span<const DeviceRecord> devices,
                                   Merge policy, bool dry_run) {
  for (const auto& e : entries) check_measured(e);
  std::lock_guard lock(impl_->mutex);
  sqlite3* db = impl_->db.get();
  MergeResult r;
  try {
    // A dry run only reads: the same checks and counts, nothing written (and no write lock).
    std::optional<sqlite::Transaction> t;
    if (!dry_run) t.emplace(db);
    if (!dry_run)
      for (const auto& d : devices) write_device(db, d, false);
    const std::int64_t now = now_unix();
    sqlite::Stmt existing(db, "SELECT median_ns FROM entries WHERE key = ?");
    for (const auto& e : entries) {
      existing.bind(1, e.key());
      std::optional<double> median;
      if (existing.step()) median = existing.real(0);
      existing.reset();
      const bool take = !median || policy == Merge::overwrite || (policy == Merge::faster && e.stats.median_ns < *median);
      if (!take) {
        ++r.kept;
        continue;
      }
      (median ? r.replaced : r.added)++;
      if (!dry_run) write_entry(db, e, now);
    }
    if (t) t->commit();
  } catch (const sqlite::Error& err) {
    impl_->rethrow(err);
  }
  return r;
}

std::optional<CacheEntry> PersistentCache::get(std::string_view key) const {
  std::lock_guard lock(impl_->mutex);
  try {
    sqlite::Stmt s(impl_->db.get(), std::string("SELECT ") + entry_columns + " FROM entries WHERE key = ?");
    s.bind(1, key);
    if (!s.step()) return std::nullopt;
    return read_entry(s, impl_->path);
  } catch (const sqlite::Error& err) {
    impl_->rethrow(err);
  }
}

std::vector<CacheEntry> PersistentCache::list(std::string_view kernel) const {
  std::lock_guard lock(impl_->mutex);
  try {
    std::string sql = std::string("SELECT ") + entry_columns + " FROM entries";
    if (!kernel.empty()) sql += " WHERE kernel = ?";
    sqlite::Stmt s(impl_->db.get(), sql + " ORDER BY key");
    if (!kernel.empty()) s.bind(1, kernel);
    std::vector<CacheEntry> out;
    while (s.step()) out.push_back(read_entry(s, impl_->path));
    return out;
  } catch (const sqlite::Error& err) {
    impl_->rethrow(err);
  }
}

std::vector<StoredMeasurement> PersistentCache::measurements(std::string_view key) const {
  std::lock_guard lock(impl_->mutex);
  try {
    sqlite::Stmt s(impl_->db.get(), R"sql(SELECT key, config, status, median_ns, iqr_ns, min_ns, samples, error,
                                            message, strategy, created_unix FROM measurements WHERE key = ? ORDER BY id)sql");
    s.bind(1, key);
    std::vector<StoredMeasurement> out;
    while (s.step()) {
      StoredMeasurement m;
      m.key = s.text(0);
      m.measurement.config = stored_config(s, 1, impl_->path);
      m.measurement.status = parse_status(s.text(2));
      m.measurement.stats = {s.real(3), s.real(4), s.real(5), static_cast<int>(s.integer(6))};
      m.measurement.error = s.real(7);
      m.measurement.message = s.text(8);
      m.strategy = s.text(9);
      m.created_unix = s.integer(10);
      out.push_back(std::move(m));
    }
    return out;
  } catch (const sqlite::Error& err) {
    impl_->rethrow(err);
  }
}

std::optional<DeviceRecord> PersistentCache::device(std::string_view fingerprint) const {
  std::lock_guard lock(impl_->mutex);
  try {
    sqlite::Stmt s(impl_->db.get(),
                   "SELECT fingerprint, backend, vendor, name, driver, architecture FROM devices WHERE fingerprint = ?");
    s.bind(1, fingerprint);
    if (!s.step()) return std::nullopt;
    return DeviceRecord{s.text(0), s.text(1), s.text(2), s.text(3), s.text(4), s.text(5)};
  } catch (const sqlite::Error& err) {
    impl_->rethrow(err);
  }
}

void PersistentCache::put_ceilings(const DeviceRecord& device, const Ceilings& c) {
  std::lock_guard lock(impl_->mutex);
  sqlite3* db = impl_->db.get();
  try {
    sqlite::Transaction t(db);
    sqlite::exec(db, R"sql(CREATE TABLE IF NOT EXISTS ceilings (
        fingerprint TEXT NOT NULL, name TEXT NOT NULL, per_second REAL NOT NULL, how TEXT NOT NULL,
        measured_unix INTEGER NOT NULL, PRIMARY KEY (fingerprint, name)))sql");
    write_device(db, device, true);
    sqlite::Stmt del(db, "DELETE FROM ceilings WHERE fingerprint = ?");
    del.bind(1, device.fingerprint).step();
    sqlite::Stmt ins(db, "INSERT INTO ceilings (fingerprint, name, per_second, how, measured_unix) VALUES (?, ?, ?, ?, ?)");
    auto row = [&](const std::string& name, const Figure& f) {
      ins.bind(1, device.fingerprint).bind(2, name).bind(3, f.per_second).bind(4, f.how).bind(5, c.measured_unix);
      ins.step();
      ins.reset();
    };
    if (c.copy) row("copy", *c.copy);
    for (const auto& [type, f] : c.matmul) row("matmul/" + std::string(to_string(type)), f);
    t.commit();
  } catch (const sqlite::Error& err) {
    impl_->rethrow(err);
  }
}

std::optional<Ceilings> PersistentCache::ceilings(std::string_view fingerprint) const {
  std::lock_guard lock(impl_->mutex);
  try {
    if (!impl_->tables().count("ceilings")) return std::nullopt;
    sqlite::Stmt s(impl_->db.get(), "SELECT name, per_second, how, measured_unix FROM ceilings WHERE fingerprint = ?");
    s.bind(1, fingerprint);
    Ceilings c;
    while (s.step()) {
      const std::string name = s.text(0);
      const Figure f{s.real(1), s.text(2)};
      // Only plausible rates: anything else is an edited file, and a roofline from it would mislead.
      if (!(f.per_second > 0) || !std::isfinite(f.per_second))
        throw IoError("persistent cache " + impl_->path.string() + ": ceiling " + printable(name) + " of " +
                      printable(fingerprint) + " is not a positive rate (`ejk devices --measure` measures it again)");
      c.measured_unix = s.integer(3);
      if (name == "copy") c.copy = f;
      else if (name.starts_with("matmul/")) c.matmul[parse_dtype(name.substr(7))] = f;
    }
    if (c.empty()) return std::nullopt;
    return c;
  } catch (const sqlite::Error& err) {
    impl_->rethrow(err);
  } catch (const InvalidArgument& e) {
    throw IoError("persistent cache " + impl_->path.string() + ": " + e.what());
  }
}

bool PersistentCache::remove(std::string_view key) {
  std::lock_guard lock(impl_->mutex);
  sqlite3* db = impl_->db.get();
  try {
    sqlite::Transaction t(db);
    sqlite::Stmt m(db, "DELETE FROM measurements WHERE key = ?");
    m.bind(1, key).step();
    sqlite::Stmt e(db, "DELETE FROM entries WHERE key = ?");
    e.bind(1, key).step();
    bool removed = sqlite3_changes(db) > 0;
    t.commit();
    return removed;
  } catch (const sqlite::Error& err) {
    impl_->rethrow(err);
  }
}

std::size_t PersistentCache::size() const {
  std::lock_guard lock(impl_->mutex);
  try {
    sqlite::Stmt s(impl_->db.get(), "SELECT count(*) FROM entries");
    return s.step() ? static_cast<std::size_t>(s.integer(0)) : 0;
  } catch (const sqlite::Error& err) {
    impl_->rethrow(err);
  }
}

CacheVerification PersistentCache::verify() const {
  std::lock_guard lock(impl_->mutex);
  CacheVerification v;
  try {
    sqlite::Stmt s(impl_->db.get(), "PRAGMA integrity_check");
    while (s.step())
      if (std::string row = s.text(0); row != "ok") v.problems.push_back(row);
    auto names = impl_->tables();
    for (const char* t : required_tables)
      if (!names.count(t)) v.problems.push_back(std::string("missing table ") + t);
    if (impl_->app_id() != application_id) v.problems.push_back("application_id is not ejk's");
    sqlite::Stmt ver(impl_->db.get(), "SELECT max(version) FROM schema_version");
    if (ver.step() && ver.integer(0) != cache_schema_version)
      v.problems.push_back("schema version " + std::to_string(ver.integer(0)) + ", expected " +
                           std::to_string(cache_schema_version));
  } catch (const sqlite::Error& err) {
    v.problems.push_back(err.what());
  }
  v.ok = v.problems.empty();
  return v;
}

}  // namespace ejk
