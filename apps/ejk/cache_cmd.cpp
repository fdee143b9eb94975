// ejk cache ls|show|rm|verify: look into the persistent cache.
#include <algorithm>
#include <charconv>

#include <fmt/core.h>

#include "commands.hpp"
#include "ejk/text.hpp"
#include "report.hpp"

namespace ejk::app {

namespace {

// Entries come from bundles too: every string of one is escaped before it reaches a terminal.
std::string shown(std::string_view s) { return printable(s, 4096); }

std::string short_key(const CacheEntry& e) {
  return shown(e.kernel) + " " + shown(e.signature) + " @ " + shown(e.fingerprint);
}

// An entry by its position in `ejk cache ls` or by a unique part of its key.
CacheEntry find_entry(PersistentCache& cache, const std::string& which) {
  if (which.empty()) throw InvalidArgument("no cache entry given: a number from `ejk cache ls` or a part of its key");
  auto all = cache.list();
  if (std::all_of(which.begin(), which.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    std::size_t i = 0;
    auto [end, ec] = std::from_chars(which.data(), which.data() + which.size(), i);
    if (ec == std::errc() && end == which.data() + which.size() && i >= 1 && i <= all.size()) return all[i - 1];
    throw InvalidArgument(fmt::format("no cache entry #{}: {} has {} entries{}", printable(which, 40),
                                      cache.path().string(), all.size(),
                                      all.empty() ? "" : fmt::format(", numbered 1 to {}", all.size())));
  }
  std::vector<CacheEntry> hits;
  for (auto& e : all)
    if (e.key().find(which) != std::string::npos) hits.push_back(e);
  if (hits.size() == 1) return hits[0];
  if (hits.empty()) throw NotFound("no cache entry matches '" + printable(which) + "'");
  throw InvalidArgument(
      fmt::format("'{}' matches {} entries; use its number from `ejk cache ls`", printable(which), hits.size()));
}

}  // namespace

void add_cache(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand("cache", "inspect the persistent cache\n"
                                          "  example: ejk cache ls --kernel matmul; ejk cache show 3; ejk cache verify");
  cmd->require_subcommand(1);
  auto kernel = std::make_shared<std::string>();
  auto* ls = cmd->add_subcommand("ls", "list entries, numbered");
  ls->add_option("--kernel", *kernel, "only this kernel");
  ls->callback([kernel, &g] {
    PersistentCache cache(default_cache_path());
    auto all = cache.list();
    nlohmann::json out = nlohmann::json::array();
    if (!g.quiet) fmt::print("{} ({} entries)\n", cache.path().string(), all.size());
    for (std::size_t i = 0; i < all.size(); ++i) {
      const auto& e = all[i];
      if (!kernel->empty() && e.kernel != *kernel) continue;
      out.push_back(e.to_json());
      fmt::print("{:>4}  {:<14} {:>10.1f} us  {}  {}\n", i + 1, shown(e.kernel), e.stats.median_ns / 1e3,
                 shown(e.config.canonical()), shown(e.signature));
    }
    if (!g.json_path.empty()) write_json_file(g.json_path, out);
  });
  auto which = std::make_shared<std::string>();
  auto* show = cmd->add_subcommand("show", "an entry with its provenance and every measurement");
  show->add_option("entry", *which, "number from `ejk cache ls` or a unique part of the key")->required();
  show->callback([which, &g] {
    PersistentCache cache(default_cache_path());
    CacheEntry e = find_entry(cache, *which);
    auto ms = cache.measurements(e.key());
    fmt::print("kernel     {} (version {})\nsignature  {}\ndevice     {}\nconfig     {}\n", shown(e.kernel),
               shown(e.version), shown(e.signature), shown(e.fingerprint), shown(e.config.canonical()));
    fmt::print("median     {:.2f} us (IQR {:.2f} us, min {:.2f} us, n {})\n", e.stats.median_ns / 1e3,
               e.stats.iqr_ns / 1e3, e.stats.min_ns / 1e3, e.stats.n);
    fmt::print("provenance {}\nmeasurements ({}):\n",
               shown(e.provenance.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)), ms.size());
    for (const auto& m : ms)
      fmt::print("  {:<13} {:>10.2f} us  {}{}\n", to_string(m.measurement.status), m.measurement.stats.median_ns / 1e3,
                 shown(m.measurement.config.canonical()),
                 m.measurement.message.empty() ? "" : "  " + shown(m.measurement.message));
    if (!g.json_path.empty()) {
      nlohmann::json j = e.to_json();
      j["measurements"] = nlohmann::json::array();
      for (const auto& m : ms) j["measurements"].push_back(m.measurement.to_json());
      write_json_file(g.json_path, j);
    }
  });
  auto* rm = cmd->add_subcommand("rm", "remove an entry and its measurements");
  auto which_rm = std::make_shared<std::string>();
  rm->add_option("entry", *which_rm, "number from `ejk cache ls` or a unique part of the key")->required();
  rm->callback([which_rm, &g] {
    PersistentCache cache(default_cache_path());
    CacheEntry e = find_entry(cache, *which_rm);
    cache.remove(e.key());
    if (!g.quiet) fmt::print("removed {}\n", short_key(e));
  });
  auto* verify = cmd->add_subcommand("verify", "check the cache file's integrity and schema");
  verify->callback([&g] {
    PersistentCache cache(default_cache_path());
    auto v = cache.verify();
    if (v.ok) {
      if (!g.quiet) fmt::print("{}: ok, {} entries\n", cache.path().string(), cache.size());
      return;
    }
    for (const auto& p : v.problems) fmt::print("{}: {}\n", cache.path().string(), p);
    g.exit_code = 1;
  });
}

}  // namespace ejk::app
