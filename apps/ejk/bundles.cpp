// ejk export and ejk import: move measured configs between machines as bundles.
#include <filesystem>
#include <map>
#include <set>

#include <fmt/core.h>

#include "commands.hpp"
#include "ejk/text.hpp"
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
    // Everything is checked before the cache is opened: the bundle's schema, checksum and every
    // entry (read_bundle), then what this build can use; the merge is one transaction.
    Bundle b = read_bundle(imf->path);
    if (b.entries.empty()) throw InvalidArgument(imf->path + ": the bundle holds no entries; nothing to import");
    std::set<std::string> unknown;
    for (const auto& e : b.entries)
      if (!Registry::global().has(e.kernel)) unknown.insert(printable(e.kernel, 80));
    if (!unknown.empty()) {
      std::string names;
      for (const auto& k : unknown) names += (names.empty() ? "" : ", ") + k;
      throw IoError(imf->path + ": entries for kernels this ejk does not have (" + names + "); nothing imported");
    }
    // This machine's devices are described by the machine, never by a bundle.
    std::map<std::string, DeviceRecord> local;
    for (const auto& d : list_devices()) local.emplace(d.fingerprint(), DeviceRecord::of(d));
    std::map<std::string, DeviceRecord> described;
    for (const auto& d : b.devices) described[d.fingerprint] = d;
    const std::string origin = printable(std::filesystem::path(imf->path).filename().string(), 200);
    std::vector<CacheEntry> usable;
    std::map<std::string, DeviceRecord> devices;
    std::set<std::string> foreign;
    for (const auto& e : b.entries) {
      const bool here = local.count(e.fingerprint) > 0;
      if (!imf->any_device && !here) {
        foreign.insert(printable(described[e.fingerprint].name.empty() ? e.fingerprint : described[e.fingerprint].name));
        continue;
      }
      devices[e.fingerprint] = here ? local[e.fingerprint] : described[e.fingerprint];
      CacheEntry copy = e;
      copy.provenance.strategy = "import:" + origin + " (" + e.provenance.strategy + ")";
      usable.push_back(std::move(copy));
    }
    if (usable.empty()) {
      std::string names;
      for (const auto& f : foreign) names += (names.empty() ? "" : ", ") + f;
      throw InvalidArgument(imf->path + ": every entry is for a device not present here (" + names +
                            "); nothing imported (--any-device imports them anyway)");
    }
    std::vector<DeviceRecord> records;
    for (auto& [_, r] : devices) records.push_back(r);
    const Merge policy = imf->merge == "overwrite" ? Merge::overwrite : imf->merge == "keep" ? Merge::keep : Merge::faster;
    auto cache = open_cache();
    MergeResult r = cache->merge(usable, records, policy, imf->dry_run);
    if (!g.quiet) {
      fmt::print("{}{}: {} added, {} replaced, {} kept (merge: {})", imf->dry_run ? "dry run: " : "", imf->path, r.added,
                 r.replaced, r.kept, imf->merge);
      if (!foreign.empty()) fmt::print(", {} skipped for devices not present here", b.entries.size() - usable.size());
      fmt::print("\n");
    }
  });
}

}  // namespace ejk::app
