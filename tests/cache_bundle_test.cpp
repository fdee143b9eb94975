// Bundles: round trip, checksum, tampering, future schemas, and everything a hostile or broken
// file can hold refused with its place; merging them into a cache all or nothing.
#include "select_support.hpp"
#include "support.hpp"

namespace ejk {
namespace {

namespace fs = std::filesystem;
using test::cfg;

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

constexpr const char* probe_signature = R"({"args":[{"dtype":"f32","shape":[64]}],"options":{}})";

Bundle sample() {
  DeviceRecord d{"opencl|Acme|Probe One|1.0", "opencl", "Acme", "Probe One", "1.0", "acme-gen1"};
  return Bundle::make({d}, {test::measured(d.fingerprint, "matmul", "0123456789abcdef", R"({"args":[],"options":{}})",
                                           cfg(8, 2), 1234.5678),
                            test::measured(d.fingerprint, "probe", "v1", probe_signature, cfg(4, 1))});
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

// Why read_bundle refuses `p` ("" when it reads).
std::string refusal(const fs::path& p) {
  try {
    read_bundle(p);
    return "";
  } catch (const IoError& e) {
    return e.what();
  }
}

// The sample bundle as text with `from` replaced by `to` (first occurrence).
std::string edited(const std::string& from, const std::string& to, nlohmann::json j = sample().to_json()) {
  std::string text = j.dump(1);
  auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

std::string nested(std::size_t depth) { return std::string(depth, '[') + "1" + std::string(depth, ']'); }

TEST(CacheBundle, DeepNestingIsRefusedWithItsPlaceNotACrash) {
  test::TempDir dir;
  auto j = sample().to_json();
  j["entries"][0]["config"]["tile"] = "DEEP";
  std::ofstream(dir / "deep.json") << edited("\"DEEP\"", nested(100000), j);
  std::string why = refusal(dir / "deep.json");
  EXPECT_TRUE(contains(why, (dir / "deep.json").string() + ":")) << why;
  EXPECT_TRUE(contains(why, "nested deeper than")) << why;
  // A signature is JSON inside a string: read with the same limits.
  Bundle b = sample();
  b.entries[1].signature = nested(30000);
  write_bundle(dir / "deep-signature.json", b);
  why = refusal(dir / "deep-signature.json");
  EXPECT_TRUE(contains(why, "entries[")) << why;
  EXPECT_TRUE(contains(why, "nested deeper than")) << why;
}

TEST(CacheBundle, NumbersOutOfRangeAreLocatedErrors) {
  test::TempDir dir;
  std::ofstream(dir / "big.json") << edited("1234.5678", "1e400");
  std::string why = refusal(dir / "big.json");
  EXPECT_TRUE(contains(why, (dir / "big.json").string() + ":")) << why;
  EXPECT_TRUE(contains(why, "1e400")) << why;
}

TEST(CacheBundle, SchemaVersionMustBeAnExactInteger) {
  test::TempDir dir;
  const std::pair<std::string, std::string> cases[] = {
      {"1.5", "must be an integer"},        {"4294967297", "newer than this ejk reads"},
      {"\"1\"", "must be an integer"},      {"0", "invalid bundle schema version 0"},
      {"-1", "invalid bundle schema version -1"}, {"18446744073709551617", "must be an integer"},
      {"true", "must be an integer"},       {"null", "must be an integer"}};
  for (const auto& [value, expected] : cases) {
    SCOPED_TRACE(value);
    std::ofstream(dir / "s.json") << edited("\"schema_version\": 1", "\"schema_version\": " + value);
    std::string why = refusal(dir / "s.json");
    EXPECT_TRUE(contains(why, (dir / "s.json").string() + ": ")) << why;
    EXPECT_TRUE(contains(why, expected)) << why;
  }
}

TEST(CacheBundle, EveryFieldHasAnExactTypeAndRange) {
  test::TempDir dir;
  auto with = [](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = sample().to_json();
    edit(j);
    return j.dump();
  };
  const std::pair<std::string, std::string> cases[] = {
      {with([](auto& j) { j["entries"] = nlohmann::json::object(); }), "'entries' must be an array, got an object"},
      {with([](auto& j) { j["devices"] = "all"; }), "'devices' must be an array, got a string"},
      {with([](auto& j) { j.erase("entries"); }), "no 'entries' list"},
      {with([](auto& j) { j["entries"][0]["stats"]["n"] = 4294967297ull; }), "'n' must be an integer from 0 to 2147483647, got 4294967297"},
      {with([](auto& j) { j["entries"][0]["stats"]["n"] = 1.5; }), "'n' must be an integer"},
      {with([](auto& j) { j["entries"][0]["stats"]["median_ns"] = "fast"; }), "'median_ns' must be a number, got a string"},
      {with([](auto& j) { j["entries"][0]["stats"]["iqr_ns"] = -3; }), "'iqr_ns' must not be negative"},
      {with([](auto& j) { j["entries"][0]["provenance"]["evaluations"] = 4294967297ull; }), "'evaluations' must be an integer"},
      {with([](auto& j) { j["entries"][0]["provenance"]["seed"] = -1; }), "'seed' must be an integer from 0"},
      {with([](auto& j) { j["entries"][0]["config"]["tile"] = {{"a", 1}}; }), "config parameter 'tile' must be an integer or a string, got an object"},
      {with([](auto& j) { j["entries"][0]["config"]["tile"] = nlohmann::json::array({1}); }), "got an array"},
      {with([](auto& j) { j["entries"][0]["kernel"] = ""; }), "'kernel' is empty"},
      {with([](auto& j) { j["entries"][0]["kernel"] = 7; }), "'kernel' must be a string, got 7"},
      {with([](auto& j) { j["entries"][0].erase("fingerprint"); }), "missing 'fingerprint'"},
      {with([](auto& j) { j["entries"][0]["fingerprint"] = "cpu|\x1b[2J"; }), "holds control characters: 'cpu|\\x1b[2J'"},
      {with([](auto& j) { j["entries"][0]["extra"] = 1; }), "unknown key 'extra' in the entry"},
      {with([](auto& j) { j["extra"] = 1; }), "unknown key 'extra' in the bundle"},
      {with([](auto& j) { j["entries"][0] = 5; }), "a cache entry is an object, got 5"},
      {with([](auto& j) { j["devices"][0]["name"] = nlohmann::json::array(); }), "devices[0]: malformed device record: 'name' must be a string"},
      {with([](auto& j) { j["sha256"] = 5; }), "no sha256 checksum"},
      {with([](auto& j) { j["created_unix"] = -5; }), "'created_unix' must be an integer from 0"},
  };
  for (const auto& [text, expected] : cases) {
    SCOPED_TRACE(expected);
    std::ofstream(dir / "t.json") << text;
    std::string why = refusal(dir / "t.json");
    EXPECT_TRUE(contains(why, (dir / "t.json").string() + ": ")) << why;
    EXPECT_TRUE(contains(why, expected)) << why;
  }
  // Entries are named by their place in the file and their kernel.
  std::string why = refusal(dir / "t.json");
  std::ofstream(dir / "t.json") << with([](auto& j) { j["entries"][1]["stats"]["n"] = "many"; });
  why = refusal(dir / "t.json");
  EXPECT_TRUE(contains(why, "entries[1] (probe): malformed cache entry: 'n' must be an integer")) << why;
}

TEST(CacheBundle, ImplausibleStatisticsAreRefusedEvenWithAValidChecksum) {
  test::TempDir dir;
  const std::pair<Stats, std::string> cases[] = {
      {{1e-300, 0, 1e-300, 15}, "a median of 1e-300 ns, below 1 ns"},
      {{4e12, 0, 4e12, 3}, "above 3.6e+12 ns"},
      {{1000, 10, 2000, 15}, "a minimum of 2000 ns, outside 0 to its median"},
      {{1000, 1e13, 900, 15}, "an interquartile range of 1e+13 ns"},
      {{1000, 10, 900, 0}, "no samples"},
  };
  for (const auto& [stats, expected] : cases) {
    SCOPED_TRACE(expected);
    Bundle b = sample();
    b.entries[1].stats = stats;
    write_bundle(dir / "p.json", b);
    std::string why = refusal(dir / "p.json");
    EXPECT_TRUE(contains(why, "(probe): ")) << why;
    EXPECT_TRUE(contains(why, expected)) << why;
    EXPECT_TRUE(contains(why, "not a plausible measurement")) << why;
  }
}

TEST(CacheBundle, SignaturesMustBeTheCanonicalOnes) {
  test::TempDir dir;
  for (const char* sig : {"sig", R"({"options":{},"args":[{"dtype":"f32","shape":[64]}]})",
                          R"({"args":[{"dtype":"f32","shape":[64.5]}],"options":{}})", "[1]", R"({"args":5})"}) {
    SCOPED_TRACE(sig);
    Bundle b = sample();
    b.entries[1].signature = sig;
    write_bundle(dir / "sig.json", b);
    std::string why = refusal(dir / "sig.json");
    EXPECT_TRUE(contains(why, "(probe): ")) << why;
  }
}

TEST(CacheBundle, DuplicateEntriesDevicesAndKeysAreRefused) {
  test::TempDir dir;
  Bundle b = sample();
  b.entries.push_back(b.entries[0]);
  write_bundle(dir / "dup.json", b);
  EXPECT_TRUE(contains(refusal(dir / "dup.json"), "are for the same invocation and device")) << refusal(dir / "dup.json");
  b = sample();
  b.devices.push_back(b.devices[0]);
  write_bundle(dir / "dupdev.json", b);
  EXPECT_TRUE(contains(refusal(dir / "dupdev.json"), "are the same device")) << refusal(dir / "dupdev.json");
  std::ofstream(dir / "dupkey.json") << edited("\"schema_version\": 1", "\"schema_version\": 1, \"schema_version\": 1");
  EXPECT_TRUE(contains(refusal(dir / "dupkey.json"), "duplicate key 'schema_version'")) << refusal(dir / "dupkey.json");
}

TEST(CacheBundle, MergeIsAllOrNothingAndNeverRewritesADevice) {
  test::TempDir dir;
  const fs::path path = dir / "ejk.sqlite";
  Bundle b = sample();
  const DeviceRecord& dev = b.devices[0];
  {
    PersistentCache cache(path);
    cache.put(b.entries[0], std::vector<Measurement>{test::meas(cfg(8, 2), Status::ok, {1234.5678, 3, 1200, 15})}, dev);
  }
  const std::string before = test::dump_tables(path);
  PersistentCache cache(path);

  CacheEntry fresh = b.entries[1];                 // a new key: would be added
  CacheEntry faster = b.entries[0];                // the stored key, measured faster: would replace it
  faster.stats = {1e-300, 0, 1e-300, 15};
  faster.config = cfg(2, 1);
  std::vector<CacheEntry> batch{fresh, faster};
  EXPECT_THROW(cache.merge(batch, b.devices, Merge::faster), InvalidArgument);
  EXPECT_EQ(test::dump_tables(path), before) << "a refused merge writes nothing, not even its first entry";

  DeviceRecord renamed = dev;
  renamed.name = "Renamed by a bundle";
  faster.stats = {1000, 10, 990, 9};
  batch = {fresh, faster};
  MergeResult dry = cache.merge(batch, std::vector<DeviceRecord>{renamed}, Merge::faster, true);
  EXPECT_EQ(dry.added, 1);
  EXPECT_EQ(dry.replaced, 1);
  EXPECT_EQ(test::dump_tables(path), before) << "a dry run writes nothing";

  MergeResult kept = cache.merge(std::vector<CacheEntry>{faster}, {}, Merge::keep);
  EXPECT_EQ(kept.kept, 1);
  MergeResult slower = cache.merge(std::vector<CacheEntry>{b.entries[0]}, {}, Merge::faster);
  EXPECT_EQ(slower.kept, 1) << "the same time is not faster";
  EXPECT_EQ(test::dump_tables(path), before);

  MergeResult r = cache.merge(batch, std::vector<DeviceRecord>{renamed}, Merge::faster);
  EXPECT_EQ(r.added, 1);
  EXPECT_EQ(r.replaced, 1);
  EXPECT_EQ(cache.get(faster.key())->config, cfg(2, 1));
  EXPECT_EQ(cache.device(dev.fingerprint)->name, "Probe One") << "a merge never changes a device row";
  DeviceRecord other{"vulkan|Else|Other|2", "vulkan", "Else", "Other", "2", "else-1"};
  CacheEntry elsewhere = fresh;
  elsewhere.fingerprint = other.fingerprint;
  cache.merge(std::vector<CacheEntry>{elsewhere}, std::vector<DeviceRecord>{other}, Merge::faster);
  EXPECT_EQ(cache.device(other.fingerprint), other) << "a device the cache does not know is recorded";
}

TEST(CacheBundle, ProfileDirsComeFromTheEnvironment) {
  ::setenv("EJK_PROFILE_DIR", "/a/one::/b/two", 1);
  EXPECT_EQ(default_profile_dirs(), (std::vector<fs::path>{"/a/one", "/b/two"}));
  ::unsetenv("EJK_PROFILE_DIR");
  for (const auto& d : default_profile_dirs()) EXPECT_TRUE(fs::is_directory(d)) << d;
}

}  // namespace
}  // namespace ejk
