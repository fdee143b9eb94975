// Bundles: reading, writing and verifying. A checksum over the canonical devices and
// entries catches edits and truncation; a newer schema is refused rather than misread.
#include "ejk/bundle.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/install_paths.hpp"
#include "core/sha256.hpp"
#include "ejk/error.hpp"
#include "ejk/version.hpp"

namespace ejk {

namespace fs = std::filesystem;

DeviceRecord DeviceRecord::of(const DeviceInfo& info) {
  return {info.fingerprint(), std::string(to_string(info.backend)), info.vendor, info.name, info.driver,
          info.architecture};
}

nlohmann::json DeviceRecord::to_json() const {
  return {{"fingerprint", fingerprint}, {"backend", backend}, {"vendor", vendor},
          {"name", name},               {"driver", driver},   {"architecture", architecture}};
}

DeviceRecord DeviceRecord::from_json(const nlohmann::json& j) {
  try {
    return {j.at("fingerprint").get<std::string>(), j.at("backend").get<std::string>(),
            j.at("vendor").get<std::string>(),      j.at("name").get<std::string>(),
            j.value("driver", ""),                  j.at("architecture").get<std::string>()};
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(std::string("malformed device record: ") + e.what());
  }
}

Bundle Bundle::make(std::vector<DeviceRecord> devices, std::vector<CacheEntry> entries) {
  Bundle b;
  b.tool_version = std::string(ejk::tool_version());
  b.created_unix =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  b.devices = std::move(devices);
  b.entries = std::move(entries);
  return b;
}

namespace {

nlohmann::json canonical_body(const Bundle& b) {
  std::vector<const DeviceRecord*> devices;
  for (const auto& d : b.devices) devices.push_back(&d);
  std::sort(devices.begin(), devices.end(), [](auto* x, auto* y) { return x->fingerprint < y->fingerprint; });
  std::vector<std::pair<std::string, const CacheEntry*>> entries;
  for (const auto& e : b.entries) entries.emplace_back(e.key(), &e);
  std::sort(entries.begin(), entries.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  nlohmann::json body = {{"devices", nlohmann::json::array()}, {"entries", nlohmann::json::array()}};
  for (auto* d : devices) body["devices"].push_back(d->to_json());
  for (auto& [_, e] : entries) body["entries"].push_back(e->to_json());
  return body;
}

}  // namespace

std::string Bundle::checksum() const { return detail::sha256_hex(canonical_body(*this).dump()); }

nlohmann::json Bundle::to_json() const {
  nlohmann::json j = canonical_body(*this);
  j["sha256"] = detail::sha256_hex(j.dump());  // before the fields the checksum does not cover
  j["schema_version"] = schema_version;
  j["tool_version"] = tool_version;
  j["created_unix"] = created_unix;
  return j;
}

Bundle Bundle::from_json(const nlohmann::json& j, std::string_view source) {
  const std::string src(source);
  if (!j.is_object()) throw InvalidArgument(src + ": a bundle is a JSON object");
  Bundle b;
  try {
    b.schema_version = j.at("schema_version").get<int>();
  } catch (const nlohmann::json::exception&) {
    throw InvalidArgument(src + ": no integer schema_version: not an ejk bundle");
  }
  if (b.schema_version > bundle_schema_version)
    throw InvalidArgument(src + ": bundle schema version " + std::to_string(b.schema_version) +
                          " is newer than this ejk reads (" + std::to_string(bundle_schema_version) + "); upgrade ejk");
  if (b.schema_version < 1) throw InvalidArgument(src + ": invalid bundle schema version " + std::to_string(b.schema_version));
  try {
    b.tool_version = j.value("tool_version", "");
    b.created_unix = j.value("created_unix", std::int64_t{0});
    for (const auto& d : j.at("devices")) b.devices.push_back(DeviceRecord::from_json(d));
    for (const auto& e : j.at("entries")) b.entries.push_back(CacheEntry::from_json(e));
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(src + ": malformed bundle: " + e.what());
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(src + ": " + e.what());
  }
  if (!j.contains("sha256") || !j.at("sha256").is_string()) throw InvalidArgument(src + ": bundle has no sha256 checksum");
  std::string want = j.at("sha256").get<std::string>(), got = b.checksum();
  if (want != got)
    throw InvalidArgument(src + ": checksum mismatch (file says " + want + ", contents hash to " + got +
                          "): the bundle was edited or damaged");
  for (const auto& e : b.entries)
    if (std::none_of(b.devices.begin(), b.devices.end(), [&](const DeviceRecord& d) { return d.fingerprint == e.fingerprint; }))
      throw InvalidArgument(src + ": entry for " + e.kernel + " names device '" + e.fingerprint +
                            "' that the bundle does not list");
  return b;
}

Bundle read_bundle(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("cannot read bundle " + path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::parse_error& e) {
    throw IoError("bundle " + path.string() + " is not valid JSON: " + e.what());
  }
  try {
    return Bundle::from_json(j, path.string());
  } catch (const InvalidArgument& e) {
    throw IoError(e.what());
  }
}

void write_bundle(const fs::path& path, const Bundle& bundle) {
  std::error_code ec;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  fs::path tmp = path.string() + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw IoError("cannot write bundle " + tmp.string());
    out << bundle.to_json().dump(2) << "\n";
    out.flush();
    if (!out) {
      fs::remove(tmp, ec);
      throw IoError("failed writing bundle " + tmp.string());
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw IoError("cannot move bundle into place at " + path.string() + ": " + ec.message());
  }
}

BundleCheck verify_bundle(const fs::path& path) {
  try {
    Bundle b = read_bundle(path);
    return {true, path.string() + ": schema " + std::to_string(b.schema_version) + ", " +
                      std::to_string(b.entries.size()) + " entries, " + std::to_string(b.devices.size()) +
                      " devices, checksum ok"};
  } catch (const std::exception& e) {
    return {false, e.what()};
  }
}

std::vector<fs::path> default_profile_dirs() {
  std::vector<fs::path> out;
  if (const char* env = std::getenv("EJK_PROFILE_DIR"); env && *env) {
    std::string_view s(env);
    while (!s.empty()) {
      auto colon = s.find(':');
      auto part = s.substr(0, colon);
      if (!part.empty()) out.emplace_back(part);
      if (colon == std::string_view::npos) break;
      s.remove_prefix(colon + 1);
    }
    return out;
  }
  // share/ejk/profiles beside the library; in the build tree a link to the source's profiles/.
  std::error_code ec;
  if (auto dir = detail::installed_profiles_dir(); !dir.empty() && fs::is_directory(dir, ec)) out.push_back(dir);
  return out;
}

}  // namespace ejk
