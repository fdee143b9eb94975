// Bundles: reading, writing and verifying. A checksum over the canonical devices and
// entries catches edits and truncation; a newer schema is refused rather than misread.
#include "ejk/bundle.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <map>

#include "core/install_paths.hpp"
#include "core/json_fields.hpp"
#include "core/sha256.hpp"
#include "ejk/error.hpp"
#include "ejk/invocation.hpp"
#include "ejk/json.hpp"
#include "ejk/text.hpp"
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
    if (!j.is_object()) throw InvalidArgument("a device record is an object, got " + json_kind(j));
    detail::only_keys(j, {"fingerprint", "backend", "vendor", "name", "driver", "architecture"}, "the device record");
    auto field = [&](const char* name) { return detail::text(detail::member(j, name), name); };
    DeviceRecord d{field("fingerprint"), field("backend"), field("vendor"), field("name"),
                   j.contains("driver") ? field("driver") : "", field("architecture")};
    if (d.fingerprint.empty()) throw InvalidArgument("'fingerprint' is empty");
    return d;
  } catch (const InvalidArgument& e) {
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

// Invalid UTF-8 (possible only in entries made in this process) is hashed as written: U+FFFD.
std::string dump_canonical(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::string Bundle::checksum() const { return detail::sha256_hex(dump_canonical(canonical_body(*this))); }

nlohmann::json Bundle::to_json() const {
  nlohmann::json j = canonical_body(*this);
  j["sha256"] = detail::sha256_hex(dump_canonical(j));  // before the fields the checksum does not cover
  j["schema_version"] = schema_version;
  j["tool_version"] = tool_version;
  j["created_unix"] = created_unix;
  return j;
}

namespace {

// An entry's signature must be the one the executor computes for its invocation, or no
// lookup would ever find it: parsed (with JSON's limits) and written back unchanged.
void check_signature(const CacheEntry& e) {
  nlohmann::json sig = parse_json(e.signature, "its signature");
  if (!sig.is_object()) throw InvalidArgument("the signature is not an invocation signature (an object)");
  sig["kernel"] = e.kernel;
  if (Invocation::from_json(sig).signature() != e.signature)
    throw InvalidArgument("the signature is not in the canonical form ejk writes");
}

}  // namespace

Bundle Bundle::from_json(const nlohmann::json& j, std::string_view source) {
  const std::string src = printable(source, 4096);
  auto refuse = [&](const std::string& what) { return InvalidArgument(src + ": " + what); };
  if (!j.is_object()) throw refuse("a bundle is a JSON object, got " + json_kind(j));
  // The schema first: a newer one may have any other shape.
  if (!j.contains("schema_version")) throw refuse("no schema_version: not an ejk bundle");
  const nlohmann::json& version = j.at("schema_version");
  if (!version.is_number_integer())
    throw refuse("schema_version must be an integer, got " + json_kind(version) + ": not an ejk bundle");
  if (version.is_number_unsigned() ? version.get<std::uint64_t>() > bundle_schema_version
                                   : version.get<std::int64_t>() > bundle_schema_version)
    throw refuse("bundle schema version " + version.dump() + " is newer than this ejk reads (" +
                 std::to_string(bundle_schema_version) + "); upgrade ejk");
  if (version.get<std::int64_t>() < 1) throw refuse("invalid bundle schema version " + version.dump());
  Bundle b;
  b.schema_version = static_cast<int>(version.get<std::int64_t>());
  try {
    detail::only_keys(j, {"schema_version", "tool_version", "created_unix", "sha256", "devices", "entries"}, "the bundle");
    if (j.contains("tool_version")) b.tool_version = detail::text(j.at("tool_version"), "tool_version");
    if (j.contains("created_unix"))
      b.created_unix = detail::integer(j.at("created_unix"), "created_unix", 0, std::numeric_limits<std::int64_t>::max());
  } catch (const InvalidArgument& e) {
    throw refuse(e.what());
  }
  for (const char* list : {"devices", "entries"}) {
    if (!j.contains(list)) throw refuse(std::string("no '") + list + "' list");
    if (!j.at(list).is_array())
      throw refuse(std::string("'") + list + "' must be an array, got " + json_kind(j.at(list)));
  }
  const auto& devices = j.at("devices");
  const auto& entries = j.at("entries");
  for (std::size_t i = 0; i < devices.size(); ++i) {
    try {
      b.devices.push_back(DeviceRecord::from_json(devices[i]));
    } catch (const InvalidArgument& e) {
      throw refuse("devices[" + std::to_string(i) + "]: " + e.what());
    }
  }
  // Where each entry sits in the file, for messages: entries[3] (matmul).
  auto where = [&](std::size_t i) {
    std::string s = "entries[" + std::to_string(i) + "]";
    if (entries[i].is_object() && entries[i].contains("kernel") && entries[i].at("kernel").is_string())
      s += " (" + printable(entries[i].at("kernel").get<std::string>(), 80) + ")";
    return s;
  };
  for (std::size_t i = 0; i < entries.size(); ++i) {
    try {
      b.entries.push_back(CacheEntry::from_json(entries[i]));
    } catch (const InvalidArgument& e) {
      throw refuse(where(i) + ": " + e.what());
    }
  }
  if (!j.contains("sha256")) throw refuse("bundle has no sha256 checksum");
  const std::string want = j.at("sha256").is_string() ? j.at("sha256").get<std::string>() : "";
  if (want.empty()) throw refuse("bundle has no sha256 checksum (a string of 64 hex digits)");
  if (const std::string got = b.checksum(); want != got)
    throw refuse("checksum mismatch (file says " + printable(want, 80) + ", contents hash to " + got +
                 "): the bundle was edited or damaged");
  // Contents the checksum cannot vouch for: a bundle written by a broken tool, or edited and
  // hashed again.
  std::map<std::string, std::size_t> fingerprints, keys;
  for (std::size_t i = 0; i < b.devices.size(); ++i)
    if (auto [it, fresh] = fingerprints.emplace(b.devices[i].fingerprint, i); !fresh)
      throw refuse("devices[" + std::to_string(it->second) + "] and devices[" + std::to_string(i) +
                   "] are the same device '" + printable(b.devices[i].fingerprint) + "'");
  for (std::size_t i = 0; i < b.entries.size(); ++i) {
    const CacheEntry& e = b.entries[i];
    if (!fingerprints.count(e.fingerprint))
      throw refuse(where(i) + ": names device '" + printable(e.fingerprint) + "' that the bundle does not list");
    if (auto [it, fresh] = keys.emplace(e.key(), i); !fresh)
      throw refuse(where(it->second) + " and " + where(i) + " are for the same invocation and device");
    if (std::string why = implausible(e.stats); !why.empty())
      throw refuse(where(i) + ": " + why + ": not a plausible measurement");
    if (e.config.empty()) throw refuse(where(i) + ": the config is empty");
    try {
      check_signature(e);
    } catch (const InvalidArgument& err) {
      throw refuse(where(i) + ": " + err.what());
    }
  }
  return b;
}

Bundle read_bundle(const fs::path& path) {
  try {
    return Bundle::from_json(read_json_file(path), path.string());
  } catch (const InvalidArgument& e) {
    throw IoError(e.what());
  }
}

void write_bundle(const fs::path& path, const Bundle& bundle) {
  std::error_code ec;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  write_json_file(path, bundle.to_json());
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
