// ejk export and ejk import: move measured configs between machines as bundles.
#include <map>
#include <set>

#include <fmt/core.h>

#include "commands.hpp"
#include "report.hpp"

namespace ejk::app {

namespace {

struct ExportFlags {
  std::string kernel, output;
};

struct ImportFlags {
  std::string path;
  std::string merge = "faster";
  bool any_device = false;
  bool dry_run = false;
};

std::unique_ptr<PersistentCache> open_cache() { return std::make_unique<PersistentCache>(default_cache_path()); }

}  // namespace

void add_bundles(CLI::App& app, Globals& g) {
  auto ef = std::make_shared<ExportFlags>();
  auto* ex = app.add_subcommand("export", "write the persistent cache's entries as a portable bundle\n"
                                          "  example: ejk export --device vulkan:0 --kernel matmul -o h100.json");
  ex->add_option("-o,--output", ef->output, "bundle file to write")->required();
  ex->add_option("--kernel", ef->kernel, "only this kernel's entries");
  ex->callback([ef, &g] {
    auto cache = open_cache();
    std::string fingerprint;
    // --device narrows the bundle to one device's entries; without it every device's are exported.
    if (!g.device.empty()) fingerprint = open_device(g.device)->info().fingerprint();
    std::vector<CacheEntry> entries;
    std::map<std::string, DeviceRecord> devices;
    for (auto& e : cache->list(ef->kernel)) {
      if (!fingerprint.empty() && e.fingerprint != fingerprint) continue;
      if (!devices.count(e.fingerprint)) {
        auto rec = cache->device(e.fingerprint);
        devices[e.fingerprint] = rec ? *rec : DeviceRecord{e.fingerprint, "", "", "", "", ""};
      }
      entries.push_back(std::move(e));
    }
    if (entries.empty()) throw NotFound("no cache entries to export in " + cache->path().string() +
                                        (ef->kernel.empty() ? "" : " for kernel " + ef->kernel) +
                                        (fingerprint.empty() ? "" : " for device " + fingerprint));
    std::vector<DeviceRecord> recs;
    for (auto& [_, r] : devices) recs.push_back(r);
    Bundle b = Bundle::make(std::move(recs), std::move(entries));
    write_bundle(ef->output, b);
    if (!g.quiet)
      fmt::print("exported {} entries for {} device(s) to {} (sha256 {})\n", b.entries.size(), b.devices.size(),
                 ef->output, b.checksum().substr(0, 16));
  });

  auto imf = std::make_shared<ImportFlags>();
  auto* im = app.add_subcommand(
      "import",
      "verify a bundle and merge its entries into the persistent cache\n"
      "  example: ejk import h100.json --merge faster\n"
      "  merge policies: faster (keep whichever config measured faster), overwrite (the bundle wins),\n"
      "  keep (existing entries win). Entries for devices absent here are skipped unless --any-device.");
  im->add_option("bundle", imf->path, "bundle file")->required();
  im->add_option("--merge", imf->merge, "faster | overwrite | keep")->check(CLI::IsMember({"faster", "overwrite", "keep"}));
  im->add_flag("--any-device", imf->any_device, "also import entries for devices this machine does not have");
  im->add_flag("--dry-run", imf->dry_run, "report what would happen, change nothing");
  im->callback([imf, &g] {
    Bundle b = read_bundle(imf->path);  // checks schema and checksum before anything is touched
    std::set<std::string> local;
    for (const auto& d : list_devices()) local.insert(d.fingerprint());
    std::map<std::string, DeviceRecord> devices;
    for (const auto& d : b.devices) devices[d.fingerprint] = d;
    std::vector<const CacheEntry*> usable;
    std::set<std::string> foreign;
    for (const auto& e : b.entries) {
      if (imf->any_device || local.count(e.fingerprint)) usable.push_back(&e);
      else foreign.insert(devices.count(e.fingerprint) ? devices[e.fingerprint].name : e.fingerprint);
    }
    if (usable.empty()) {
      std::string names;
      for (const auto& f : foreign) names += (names.empty() ? "" : ", ") + f;
      throw InvalidArgument(imf->path + ": every entry is for a device not present here (" + names +
                            "); nothing imported (--any-device imports them anyway)");
    }
    auto cache = open_cache();
    int added = 0, replaced = 0, kept = 0;
    for (const CacheEntry* e : usable) {
      auto existing = cache->get(e->key());
      bool take = !existing || imf->merge == "overwrite" ||
                  (imf->merge == "faster" && e->stats.median_ns < existing->stats.median_ns);
      if (!take) {
        ++kept;
        continue;
      }
      (existing ? replaced : added)++;
      if (imf->dry_run) continue;
      CacheEntry copy = *e;
      copy.provenance.strategy = "import:" + std::filesystem::path(imf->path).filename().string() + " (" +
                                 e->provenance.strategy + ")";
      cache->put(copy, {}, devices.count(e->fingerprint) ? std::optional(devices[e->fingerprint]) : std::nullopt);
    }
    if (!g.quiet) {
      fmt::print("{}{}: {} added, {} replaced, {} kept (merge: {})", imf->dry_run ? "dry run: " : "", imf->path, added,
                 replaced, kept, imf->merge);
      if (!foreign.empty()) fmt::print(", {} skipped for devices not present here", b.entries.size() - usable.size());
      fmt::print("\n");
    }
  });
}

}  // namespace ejk::app
