#include "select/profile.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>

#include "ejk/error.hpp"
#include "ejk/text.hpp"
#include "select/nearest.hpp"

namespace ejk::select {

namespace fs = std::filesystem;

ProfileStore::ProfileStore(const std::vector<fs::path>& dirs) {
  for (const auto& dir : dirs) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    std::vector<fs::path> files;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
      // Only regular files: a FIFO named *.json would block every program at its first selection.
      if (it->path().extension() == ".json" && it->is_regular_file(ec)) files.push_back(it->path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      try {
        // read_bundle checks every entry, its signature included, before any is used.
        Bundle b = read_bundle(f);
        std::vector<Item> items;  // all of a bundle or none of it
        for (auto& e : b.entries) {
          Item item{e, {}, f.filename().string(), invocation_of(e.kernel, e.signature)};
          for (const auto& d : b.devices)
            if (d.fingerprint == e.fingerprint) item.device = d;
          items.push_back(std::move(item));
        }
        for (auto& item : items) items_.push_back(std::move(item));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "ejk: skipping profile bundle %s: %s\n", printable(f.string(), 4096).c_str(),
                     printable(e.what(), std::string::npos).c_str());
      }
    }
  }
}

std::shared_ptr<const ProfileStore> ProfileStore::shared(const std::vector<fs::path>& dirs) {
  static std::mutex mutex;
  static auto* stores = new std::map<std::string, std::weak_ptr<const ProfileStore>>;
  std::string id;
  for (const auto& d : dirs) id += d.string() + '\0';
  std::lock_guard lock(mutex);
  auto& slot = (*stores)[id];
  if (auto s = slot.lock()) return s;
  auto s = std::make_shared<const ProfileStore>(dirs);
  slot = s;
  return s;
}

namespace {

bool same_architecture(const DeviceRecord& d, const DeviceInfo& dev) {
  return !dev.architecture.empty() && d.backend == to_string(dev.backend) && d.vendor == dev.vendor &&
         d.architecture == dev.architecture;
}

}  // namespace

std::optional<ProfileHit> ProfileStore::find(const Invocation& inv, const Kernel& kernel, std::string_view version,
                                             const DeviceInfo& dev,
                                             const std::function<std::string(const Config&)>& mismatch) const {
  const std::string fingerprint = dev.fingerprint();
  const std::string signature = inv.signature();
  std::vector<const Item*> exact, family;
  for (const auto& item : items_) {
    if (item.entry.kernel != inv.kernel || item.entry.version != version) continue;  // kernel changed since
    if (item.entry.fingerprint == fingerprint) exact.push_back(&item);
    else if (same_architecture(item.device, dev)) family.push_back(&item);
  }
  auto fits = [&](const Item* it) { return mismatch(it->entry.config).empty(); };
  for (const Item* it : exact)
    if (it->entry.signature == signature && fits(it))
      return ProfileHit{it->entry.config, "profile: exact device (" + it->file + ")"};
  for (const Item* it : family)
    if (it->entry.signature == signature && fits(it))
      return ProfileHit{it->entry.config, "profile: same vendor and architecture, " + it->device.name + " " +
                                              it->device.architecture + " (" + it->file + ")"};
  // Nearest workload: exact-device entries before same-architecture ones at equal distance.
  std::vector<std::pair<double, const Item*>> near;
  for (const auto* group : {&exact, &family})
    for (const Item* it : *group)
      if (double d = log_distance(it->inv, inv); std::isfinite(d)) near.emplace_back(d, it);
  std::stable_sort(near.begin(), near.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [d, it] : near)
    if (fits(it)) {
      bool same_device = it->entry.fingerprint == fingerprint;
      return ProfileHit{it->entry.config, "profile: nearest workload, " + differences(kernel, it->inv, inv) + " (" +
                                              (same_device ? "exact device" : "same architecture") + ", " + it->file +
                                              ")"};
    }
  return std::nullopt;
}

}  // namespace ejk::select
