// Bundles: round trip, checksum, tampering, future schemas.
#include "select_support.hpp"
#include "support.hpp"

namespace ejk {
namespace {

namespace fs = std::filesystem;
using test::cfg;

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

Bundle sample() {
  DeviceRecord d{"opencl|Acme|Probe One|1.0", "opencl", "Acme", "Probe One", "1.0", "acme-gen1"};
  return Bundle::make({d}, {test::measured(d.fingerprint, "matmul", "0123456789abcdef", R"({"args":[],"options":{}})",
                                           cfg(8, 2), 1234.5678),
                            test::measured(d.fingerprint, "probe", "v1", "sig", cfg(4, 1))});
}

void rewrite(const fs::path& p, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(test::read_file(p));
  edit(j);
  std::ofstream(p) << j.dump(2);
}

TEST(CacheBundle, WritesReadsAndVerifies) {
  test::TempDir dir;
  Bundle b = sample();
  write_bundle(dir / "b.json", b);
  Bundle back = read_bundle(dir / "b.json");
  EXPECT_EQ(back.to_json(), b.to_json());
  EXPECT_EQ(back.checksum(), b.checksum());
  EXPECT_EQ(back.devices, b.devices);
  EXPECT_EQ(back.entries.size(), 2u);
  EXPECT_EQ(back.schema_version, bundle_schema_version);
  EXPECT_FALSE(back.tool_version.empty());
  EXPECT_GT(back.created_unix, 0);
  BundleCheck ok = verify_bundle(dir / "b.json");
  EXPECT_TRUE(ok.ok) << ok.message;
  EXPECT_TRUE(contains(ok.message, "2 entries")) << ok.message;
  // The checksum does not depend on the order entries were given in.
  Bundle reordered = b;
  std::swap(reordered.entries[0], reordered.entries[1]);
  EXPECT_EQ(reordered.checksum(), b.checksum());
}

TEST(CacheBundle, TamperingIsRefused) {
  test::TempDir dir;
  write_bundle(dir / "b.json", sample());
  rewrite(dir / "b.json", [](nlohmann::json& j) { j["entries"][0]["config"]["tile"] = 16; });
  try {
    read_bundle(dir / "b.json");
    FAIL() << "an edited bundle must be refused";
  } catch (const IoError& e) {
    EXPECT_TRUE(contains(e.what(), "checksum mismatch")) << e.what();
    EXPECT_TRUE(contains(e.what(), (dir / "b.json").string())) << e.what();
  }
  EXPECT_FALSE(verify_bundle(dir / "b.json").ok);

  write_bundle(dir / "c.json", sample());
  rewrite(dir / "c.json", [](nlohmann::json& j) { j["devices"][0]["architecture"] = "acme-gen9"; });
  EXPECT_FALSE(verify_bundle(dir / "c.json").ok) << "device records are covered by the checksum too";

  write_bundle(dir / "d.json", sample());
  rewrite(dir / "d.json", [](nlohmann::json& j) { j.erase("sha256"); });
  EXPECT_TRUE(contains(verify_bundle(dir / "d.json").message, "no sha256")) << verify_bundle(dir / "d.json").message;

  std::string text = test::read_file(dir / "b.json");
  std::ofstream(dir / "e.json") << text.substr(0, text.size() / 2);
  EXPECT_TRUE(contains(verify_bundle(dir / "e.json").message, "not valid JSON"));
  EXPECT_FALSE(verify_bundle(dir / "missing.json").ok);
}

TEST(CacheBundle, FutureSchemaIsRefused) {
  test::TempDir dir;
  Bundle b = sample();
  b.schema_version = bundle_schema_version + 1;
  write_bundle(dir / "future.json", b);
  try {
    read_bundle(dir / "future.json");
    FAIL() << "a newer schema must be refused";
  } catch (const IoError& e) {
    EXPECT_TRUE(contains(e.what(), "schema version " + std::to_string(bundle_schema_version + 1))) << e.what();
    EXPECT_TRUE(contains(e.what(), "upgrade")) << e.what();
  }
}

TEST(CacheBundle, EntriesMustNameAListedDevice) {
  Bundle b = sample();
  b.entries[0].fingerprint = "vulkan|Nobody|Ghost|0";
  try {
    Bundle::from_json(b.to_json(), "inline");
    FAIL() << "an entry of an unlisted device must be refused";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "Ghost")) << e.what();
  }
}

TEST(CacheBundle, ProfileDirsComeFromTheEnvironment) {
  ::setenv("EJK_PROFILE_DIR", "/a/one::/b/two", 1);
  EXPECT_EQ(default_profile_dirs(), (std::vector<fs::path>{"/a/one", "/b/two"}));
  ::unsetenv("EJK_PROFILE_DIR");
  for (const auto& d : default_profile_dirs()) EXPECT_TRUE(fs::is_directory(d)) << d;
}

}  // namespace
}  // namespace ejk
