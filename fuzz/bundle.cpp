// Bundles: a file -> read_bundle (JSON, schema, entries, checksum, devices) -> what import does
// with an accepted one, into a private temporary cache: each entry stored, read back unchanged,
// and removed again. Mutated files almost never keep a valid checksum, so an input whose only
// fault is its checksum is read a second time with the checksum its contents hash to.
#include <nlohmann/json.hpp>

#include "ejk/bundle.hpp"
#include "ejk/cache.hpp"
#include "ejk/error.hpp"
#include "support.hpp"

namespace {

const ejk::fuzz::InputFile& input() {
  static const ejk::fuzz::InputFile file("bundle.json");
  return file;
}

ejk::PersistentCache& cache() {
  static ejk::PersistentCache c(input().dir() / "cache.sqlite");
  return c;
}

// The checksum the bundle's devices and entries hash to, when they parse at all.
std::optional<std::string> contents_checksum(const nlohmann::json& j) {
  try {
    ejk::Bundle b;
    for (const auto& d : j.at("devices")) b.devices.push_back(ejk::DeviceRecord::from_json(d));
    for (const auto& e : j.at("entries")) b.entries.push_back(ejk::CacheEntry::from_json(e));
    return b.checksum();
  } catch (const std::exception&) {
    return std::nullopt;  // read_bundle must refuse it too, which the first read checked
  }
}

std::optional<ejk::Bundle> read(std::string_view bytes) {
  const std::string& path = input().write(bytes);
  try {
    return ejk::read_bundle(path);
  } catch (const ejk::IoError& e) {
    if (std::string_view(e.what()).find(path) == std::string_view::npos) ejk::fuzz::finding("a refusal that does not name the file", e.what());
    return std::nullopt;
  }
}

void import(const ejk::Bundle& b) {
  // Written back out, the bundle reads the same.
  const ejk::Bundle again = ejk::Bundle::from_json(b.to_json(), "round trip");
  if (again.checksum() != b.checksum()) ejk::fuzz::finding("a bundle that does not survive writing and reading");
  for (const auto& e : b.entries) {
    std::optional<ejk::DeviceRecord> device;
    for (const auto& d : b.devices)
      if (d.fingerprint == e.fingerprint) device = d;
    try {
      cache().put(e, {}, device);
    } catch (const ejk::InvalidArgument&) {
      continue;  // not a measured entry: import refuses it
    }
    auto stored = cache().get(e.key());
    if (!stored) ejk::fuzz::finding("an imported entry is not in the cache", e.key());
    if (stored->config != e.config || stored->stats.median_ns != e.stats.median_ns || stored->stats.n != e.stats.n)
      ejk::fuzz::finding("an imported entry reads back changed", e.to_json().dump() + "\n" + stored->to_json().dump());
    (void)cache().list(e.kernel);
    (void)cache().device(e.fingerprint);
    cache().remove(e.key());
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)cache();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes = ejk::fuzz::text_of(data, size);
  if (auto b = read(bytes)) {
    import(*b);
    return 0;
  }
  nlohmann::json j = nlohmann::json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return 0;
  auto sum = contents_checksum(j);
  if (!sum || (j.contains("sha256") && j["sha256"] == *sum)) return 0;
  j["sha256"] = *sum;
  if (auto b = read(j.dump())) import(*b);
  return 0;
}
