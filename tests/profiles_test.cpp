// The shipped profiles/ bundles: each one reads (schema, checksum, devices) and every entry
// belongs to the current version of an implementation this build has, so the profile tier can
// use it. A change to a kernel's sources fails this test until its profiles are re-tuned
// (profiles/README.md says how).
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "ejk/bundle.hpp"
#include "ejk/executor.hpp"
#include "ejk/registry.hpp"
#include "select/profile.hpp"
#include "select_support.hpp"
#include "support.hpp"

namespace ejk {
namespace {

std::set<std::string> current_versions(const std::string& kernel, const std::string& backend) {
  std::set<std::string> out;
  const Registry& r = Registry::global();
  for (const Implementation* impl : r.implementations(kernel))
    if (to_string(impl->backend()) == backend) out.insert(r.version(*impl));
  return out;
}

TEST(Profiles, ShippedBundlesAreValidAndCurrent) {
  int bundles = 0;
  for (const auto& entry : std::filesystem::directory_iterator(EJK_PROFILES_DIR)) {
    if (entry.path().extension() != ".json") continue;
    ++bundles;
    SCOPED_TRACE(entry.path().string());
    const BundleCheck check = verify_bundle(entry.path());
    ASSERT_TRUE(check.ok) << check.message;
    const Bundle b = read_bundle(entry.path());
    EXPECT_FALSE(b.entries.empty());
    for (const CacheEntry& e : b.entries) {
      std::string backend;
      for (const auto& d : b.devices)
        if (d.fingerprint == e.fingerprint) backend = d.backend;
      ASSERT_TRUE(Registry::global().has(e.kernel)) << e.kernel;
      const auto versions = current_versions(e.kernel, backend);
      if (versions.empty()) {
        // A backend this build leaves out (EJK_WITH_OPENCL / EJK_WITH_VULKAN off) cannot be
        // checked here; CI builds every backend, so there it always is.
        EXPECT_FALSE(test::in_ci()) << e.kernel << " has no " << backend << " implementation in this build";
        continue;
      }
      EXPECT_TRUE(versions.count(e.version)) << e.kernel << " on " << backend << ": entry of version " << e.version
                                             << " is stale (current: " << *versions.begin() << "); re-tune it";
    }
  }
  EXPECT_GE(bundles, 1);
}

// Every device present that a shipped bundle describes (same backend, vendor and architecture)
// gets its entries from the profile tier with no cache and no tuning. lavapipe's bundle matches
// every lavapipe, so CI always exercises this.
TEST(Profiles, ShippedBundlesArePickedUpByTheProfileTier) {
  test::TempDir dir;
  int matched = 0;
  for (const auto& info : list_devices()) {
    for (const auto& entry : std::filesystem::directory_iterator(EJK_PROFILES_DIR)) {
      if (entry.path().extension() != ".json") continue;
      const Bundle b = read_bundle(entry.path());
      const DeviceRecord here = DeviceRecord::of(info);
      for (const auto& rec : b.devices) {
        if (rec.backend != here.backend || rec.vendor != here.vendor || rec.architecture != here.architecture) continue;
        ++matched;
        Executor ex(open_device(info.id()), ExecutorOptions{nullptr, dir / "ejk.sqlite",
                                                            std::vector<std::filesystem::path>{EJK_PROFILES_DIR}});
        for (const CacheEntry& e : b.entries) {
          if (e.fingerprint != rec.fingerprint) continue;
          auto j = nlohmann::json::parse(e.signature);
          j["kernel"] = e.kernel;
          const Invocation inv = Invocation::from_json(j);
          const Selection s = ex.select(inv);
          EXPECT_EQ(s.tier, Tier::profile) << info.id() << " " << e.kernel << " " << e.signature << ": " << s.reason;
          EXPECT_EQ(s.config, e.config) << s.reason;
          EXPECT_NE(s.reason.find(entry.path().filename().string()), std::string::npos) << s.reason;
        }
      }
    }
  }
  if (test::in_ci()) {
    EXPECT_GE(matched, 1) << "lavapipe's shipped bundle should match lavapipe";
  }
}

// A profile folder is read at the first selection of every program: whatever lies there, a bad
// bundle is reported with its path and skipped, and the good ones still serve.
TEST(Profiles, BadBundlesInTheProfileFolderAreSkippedWithTheirPath) {
  test::TempDir dir;
  for (const auto& entry : std::filesystem::directory_iterator(EJK_PROFILES_DIR))
    if (entry.path().extension() == ".json") {
      std::filesystem::copy_file(entry.path(), dir / entry.path().filename().string());
      break;
    }
  const std::size_t shipped = select::ProfileStore({dir.path}).size();
  ASSERT_GT(shipped, 0u);
  std::string config;
  for (int i = 0; i < 100000; ++i) config += "{\"a\":";
  config += "1" + std::string(100000, '}');
  const std::string deep =
      R"({"schema_version": 1, "devices": [{"fingerprint": "f", "backend": "cpu", "vendor": "v", "name": "n",
          "driver": "d", "architecture": "a"}], "sha256": "0",
          "entries": [{"fingerprint": "f", "kernel": "matmul", "version": "1", "signature": "{}", "provenance": {},
                       "stats": {"median_ns": 1, "iqr_ns": 0, "min_ns": 1, "n": 1}, "config": )" + config + "}]}";
  const std::pair<std::string, std::string> bad[] = {
      {"deep.json", deep},
      {"types.json", R"({"schema_version": 1, "devices": [], "entries": {"a": 1}, "sha256": "0"})"},
      {"huge.json", R"({"schema_version": 1, "x": 1e400})"},
      {"empty.json", ""},
      {"binary.json", std::string("\0\xff\xfe{[", 5)},
  };
  for (const auto& [name, text] : bad) std::ofstream(dir / name) << text;
  ASSERT_EQ(::mkfifo((dir / "fifo.json").c_str(), 0644), 0);  // would block a reader forever
  ::testing::internal::CaptureStderr();
  const select::ProfileStore store({dir.path});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(store.size(), shipped);
  for (const auto& [name, text] : bad) {
    const std::string path = (dir / name).string();
    EXPECT_NE(err.find("skipping profile bundle " + path + ": " + path), std::string::npos) << name << "\n" << err;
  }
  EXPECT_NE(err.find("nested deeper than"), std::string::npos) << err;
}

}  // namespace
}  // namespace ejk
