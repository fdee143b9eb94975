// The persistent cache: round trips, many writers, kill -9, damaged and foreign files.
#include <sqlite3.h>
#include <signal.h>
#include <sys/select.h>

#include <random>

#include "select_support.hpp"
#include "support.hpp"

namespace ejk {
namespace {

namespace fs = std::filesystem;
using test::cfg;

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

// Runs SQL on a cache file behind the library's back.
void raw_sql(const fs::path& db, const std::string& sql) {
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
  char* err = nullptr;
  int rc = sqlite3_exec(h, sql.c_str(), nullptr, nullptr, &err);
  EXPECT_EQ(rc, SQLITE_OK) << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(h);
}

std::int64_t count_rows(PersistentCache& c, const std::string& key) {
  return static_cast<std::int64_t>(c.measurements(key).size());
}

std::vector<fs::path> aside_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& f : fs::directory_iterator(dir))
    if (contains(f.path().filename().string(), ".corrupt-") && !contains(f.path().filename().string(), "-wal"))
      out.push_back(f.path());
  return out;
}

TEST(CacheSqlite, PutGetListMeasurementsRemove) {
  test::TempDir dir;
  fs::path path = dir / "nested" / "ejk.sqlite";
  PersistentCache cache(path);
  EXPECT_TRUE(fs::exists(path)) << "the folder and file are created";
  EXPECT_FALSE(cache.moved_aside());
  CacheEntry a = test::measured("fp-a", "probe", "v1", "sig-a", cfg(8, 2), 1234.5);
  a.provenance.seed = 0xfedcba9876543210ull;  // does not fit a signed 64-bit column as is
  CacheEntry b = test::measured("fp-a", "other", "v1", "sig-b", cfg(2, 1));
  std::vector<Measurement> ms{test::meas(cfg(8, 2), Status::ok, {1234.5, 3, 1200, 15}),
                              test::meas(cfg(4, 1), Status::compile, {}, "error: too many registers"),
                              test::meas(cfg(16, 1), Status::timeout, {}, "over 10 ms")};
  DeviceRecord dev{"fp-a", "opencl", "Acme", "Probe One", "1.0", "acme-gen1"};
  cache.put(a, ms, dev);
  cache.put(b);
  auto got = cache.get(a.key());
  ASSERT_TRUE(got);
  EXPECT_EQ(got->to_json(), a.to_json());
  EXPECT_FALSE(cache.get("no such key"));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.list().size(), 2u);
  ASSERT_EQ(cache.list("probe").size(), 1u);
  EXPECT_EQ(cache.list("probe")[0].signature, "sig-a");
  auto stored = cache.measurements(a.key());
  ASSERT_EQ(stored.size(), 3u);
  EXPECT_EQ(stored[1].measurement.status, Status::compile);
  EXPECT_EQ(stored[1].measurement.message, "error: too many registers");
  EXPECT_EQ(stored[2].measurement.config, cfg(16, 1));
  EXPECT_EQ(stored[0].strategy, "anneal");
  EXPECT_EQ(cache.device("fp-a"), dev);

  // A newer tune replaces the best config and adds its measurements to the history.
  CacheEntry a2 = a;
  a2.config = cfg(16, 1);
  a2.provenance.strategy = "exhaustive";
  cache.put(a2, std::vector<Measurement>{test::meas(cfg(16, 1), Status::ok, {1000, 1, 990, 9}, "")});
  EXPECT_EQ(cache.get(a.key())->config, cfg(16, 1));
  EXPECT_EQ(cache.measurements(a.key()).size(), 4u);

  CacheEntry unmeasured = a;
  unmeasured.stats = {};
  EXPECT_THROW(cache.put(unmeasured), InvalidArgument) << "only measured results are written";
  EXPECT_TRUE(cache.remove(a.key()));
  EXPECT_FALSE(cache.remove(a.key()));
  EXPECT_FALSE(cache.get(a.key()));
  EXPECT_TRUE(cache.measurements(a.key()).empty());
  EXPECT_TRUE(cache.verify().ok);
}

TEST(CacheSqlite, DefaultLocationFollowsTheEnvironment) {
  const char* saved = std::getenv("EJK_CACHE_DIR");
  std::string keep = saved ? saved : "";
  ::setenv("EJK_CACHE_DIR", "/tmp/x/ejk-cache", 1);
  EXPECT_EQ(default_cache_path(), fs::path("/tmp/x/ejk-cache/ejk.sqlite"));
  ::unsetenv("EJK_CACHE_DIR");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  std::string keep_xdg = xdg ? xdg : "";
  ::setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  EXPECT_EQ(default_cache_dir(), fs::path("/tmp/xdg/ejk"));
  ::unsetenv("XDG_CACHE_HOME");
  if (const char* home = std::getenv("HOME")) {
    EXPECT_EQ(default_cache_dir(), fs::path(home) / ".cache" / "ejk");
  }
  if (!keep_xdg.empty()) ::setenv("XDG_CACHE_HOME", keep_xdg.c_str(), 1);
  if (saved) ::setenv("EJK_CACHE_DIR", keep.c_str(), 1);
}

TEST(CacheSqlite, EightProcessesWritingAtOnceLoseNothing) {
  test::TempDir dir;
  fs::path path = dir / "ejk.sqlite";
  constexpr int writers = 8, writes = 500;
  std::vector<test::Child> children;
  for (int w = 0; w < writers; ++w)
    children.push_back(test::spawn({test::helper_path(), "write", path.string(), std::to_string(w),
                                    std::to_string(writes), "1"},
                                   true));  // its progress lines (2 KB) fit the pipe
  for (auto& c : children) EXPECT_EQ(test::wait_for(c), 0);
  PersistentCache cache(path);
  EXPECT_EQ(cache.size(), static_cast<std::size_t>(writers * writes));
  std::map<std::string, std::size_t> per_writer;
  for (const auto& e : cache.list("probe")) ++per_writer[e.fingerprint];
  for (int w = 0; w < writers; ++w) EXPECT_EQ(per_writer["fp-" + std::to_string(w)], static_cast<std::size_t>(writes));
  EXPECT_EQ(count_rows(cache, test::measured("fp-3", "probe", "v1", "sig-499", {}).key()), 1);
  EXPECT_TRUE(cache.verify().ok);
}

// Reads the writer's "committed N" lines until at least `want` arrived or the deadline.
int read_committed(int fd, int want, std::string& buffer, int last) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (last < want && std::chrono::steady_clock::now() < deadline) {
    fd_set set;
    FD_ZERO(&set);
    FD_SET(fd, &set);
    timeval tv{0, 100000};
    if (::select(fd + 1, &set, nullptr, nullptr, &tv) <= 0) continue;
    char chunk[4096];
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n <= 0) break;
    buffer.append(chunk, static_cast<std::size_t>(n));
    std::size_t nl;
    while ((nl = buffer.find('\n')) != std::string::npos) {
      last = std::stoi(buffer.substr(0, nl));
      buffer.erase(0, nl + 1);
    }
  }
  return last;
}

TEST(CacheSqlite, KillNineMidTransactionLeavesAValidCompleteCache) {
  test::TempDir dir;
  fs::path path = dir / "ejk.sqlite";
  std::mt19937 rng(20261122);
  constexpr int per = 40;  // measurements per transaction: a long transaction to land the kill in
  for (int round = 0; round < 20; ++round) {
    std::string tag = "kill" + std::to_string(round);
    test::Child c = test::spawn({test::helper_path(), "write", path.string(), tag, "100000", std::to_string(per)}, true);
    std::string buffer;
    int committed = read_committed(c.out, 3 + static_cast<int>(rng() % 40), buffer, 0);
    ::kill(c.pid, SIGKILL);
    // Whatever the writer printed before dying was committed; it may have committed one more.
    committed = read_committed(c.out, 1 << 30, buffer, committed);
    EXPECT_EQ(test::wait_for(c), 128 + SIGKILL);
    ASSERT_GT(committed, 0) << "round " << round;

    PersistentCache cache(path);
    EXPECT_FALSE(cache.moved_aside()) << "round " << round;
    auto check = cache.verify();
    EXPECT_TRUE(check.ok) << "round " << round << ": " << (check.problems.empty() ? "" : check.problems[0]);
    std::size_t entries = 0;
    for (const auto& e : cache.list("probe"))
      if (e.fingerprint == "fp-" + tag) {
        ++entries;
        EXPECT_EQ(cache.measurements(e.key()).size(), static_cast<std::size_t>(per))
            << "a transaction is all or nothing (round " << round << ")";
      }
    EXPECT_GE(entries, static_cast<std::size_t>(committed)) << "round " << round;
    EXPECT_LE(entries, static_cast<std::size_t>(committed) + 1) << "round " << round;
  }
}

TEST(CacheSqlite, TruncatedFileIsReportedAndMovedAside) {
  test::TempDir dir;
  fs::path path = dir / "ejk.sqlite";
  {
    PersistentCache cache(path);
    for (int i = 0; i < 400; ++i)
      cache.put(test::measured("fp", "probe", "v1", "sig-" + std::to_string(i), cfg(8, 1)),
                std::vector<Measurement>{test::meas(cfg(8, 1), Status::ok, {1, 1, 1, 1}, std::string(200, 'x'))});
  }
  auto size = fs::file_size(path);
  ASSERT_GT(size, 8192u);
  fs::resize_file(path, size / 2);
  testing::internal::CaptureStderr();
  PersistentCache reopened(path);
  std::string err = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(reopened.moved_aside());
  EXPECT_TRUE(contains(err, path.string())) << err;
  EXPECT_TRUE(contains(err, reopened.moved_aside()->string())) << err;
  EXPECT_TRUE(contains(err, "damaged")) << err;
  EXPECT_EQ(fs::file_size(*reopened.moved_aside()), size / 2) << "the damaged file is kept, not emptied";
  EXPECT_EQ(reopened.size(), 0u);
  EXPECT_TRUE(reopened.verify().ok);
  reopened.put(test::measured("fp", "probe", "v1", "fresh", cfg(8, 1)));
  EXPECT_EQ(reopened.size(), 1u);
}

TEST(CacheSqlite, GarbageAndForeignFilesAreReportedAndMovedAside) {
  test::TempDir dir;
  fs::path path = dir / "ejk.sqlite";
  std::string garbage(10000, '\0');
  std::mt19937 rng(7);
  for (auto& ch : garbage) ch = static_cast<char>(rng());
  std::ofstream(path, std::ios::binary) << garbage;
  testing::internal::CaptureStderr();
  {
    PersistentCache cache(path);
    std::string err = testing::internal::GetCapturedStderr();
    ASSERT_TRUE(cache.moved_aside());
    EXPECT_TRUE(contains(err, "not an SQLite database")) << err;
    EXPECT_TRUE(contains(err, path.string())) << err;
    EXPECT_EQ(test::read_file(*cache.moved_aside()), garbage);
    EXPECT_EQ(cache.size(), 0u);
  }
  fs::remove(path);
  raw_sql(path, "CREATE TABLE photos (id INTEGER PRIMARY KEY, data BLOB); INSERT INTO photos (data) VALUES (x'00');");
  testing::internal::CaptureStderr();
  {
    PersistentCache cache(path);
    std::string err = testing::internal::GetCapturedStderr();
    ASSERT_TRUE(cache.moved_aside());
    EXPECT_TRUE(contains(err, "not an ejk cache")) << err;
    EXPECT_TRUE(contains(err, "photos")) << err;
    EXPECT_TRUE(cache.verify().ok);
  }
  EXPECT_EQ(aside_files(dir.path).size(), 2u) << "both files kept under distinct names";
}

TEST(CacheSqlite, NewerSchemaIsRefusedAndLeftAlone) {
  test::TempDir dir;
  fs::path path = dir / "ejk.sqlite";
  {
    PersistentCache cache(path);
    cache.put(test::measured("fp", "probe", "v1", "sig", cfg(8, 1)));
  }
  raw_sql(path, "UPDATE schema_version SET version = 99");
  try {
    PersistentCache cache(path);
    FAIL() << "a newer schema must be refused";
  } catch (const IoError& e) {
    EXPECT_TRUE(contains(e.what(), "schema version 99")) << e.what();
    EXPECT_TRUE(contains(e.what(), path.string())) << e.what();
  }
  EXPECT_TRUE(aside_files(dir.path).empty());
  raw_sql(path, "UPDATE schema_version SET version = 1");
  EXPECT_EQ(PersistentCache(path).size(), 1u) << "the refused file was not touched";
}

TEST(CacheSqlite, ExecutorKeepsRunningWhenTheCacheIsRefused) {
  test::TempDir dir;
  fs::path path = dir / "ejk.sqlite";
  { PersistentCache cache(path); }
  raw_sql(path, "UPDATE schema_version SET version = 99");
  auto reg = test::probe_registry();
  ScopedPolicy neutral({AutotunePolicy::heuristics, Tier::heuristic, SelectionLog::off});
  Executor ex(test::fake_device(), {reg.get(), path, std::vector<fs::path>{}});
  testing::internal::CaptureStderr();
  Selection s = ex.select(test::probe(64));
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(s.tier, Tier::heuristic);
  EXPECT_EQ(ex.persistent_cache(), nullptr);
  EXPECT_TRUE(contains(err, "persistent cache tier off")) << err;
  EXPECT_TRUE(contains(err, "schema version 99")) << err;
}

}  // namespace
}  // namespace ejk
