// Batch tuning of a recorded trace (EJK_RECORD=trace.jsonl).
#include <fstream>
#include <set>

#include "ejk/bundle.hpp"
#include "ejk/cache.hpp"
#include "ejk/error.hpp"
#include "ejk/registry.hpp"
#include "ejk/tuner.hpp"

namespace ejk {

std::vector<TraceRecord> read_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw IoError("cannot read trace " + path);
  std::vector<TraceRecord> out;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      auto j = nlohmann::json::parse(line);
      if (!j.is_object()) throw InvalidArgument("not a JSON object");
      TraceRecord r;
      r.invocation = Invocation::from_json(j);
      auto text = [&](const char* key) {
        return j.contains(key) && j.at(key).is_string() ? j.at(key).get<std::string>() : std::string();
      };
      r.device = text("device");
      r.version = text("version");
      r.tier = text("tier");
      out.push_back(std::move(r));
    } catch (const nlohmann::json::exception& e) {
      throw IoError(path + ":" + std::to_string(number) + ": not a JSON line: " + e.what());
    } catch (const InvalidArgument& e) {
      throw IoError(path + ":" + std::to_string(number) + ": " + e.what());
    }
  }
  return out;
}

std::vector<TuneResult> tune_trace(const std::string& path, const BatchOptions& options) {
  auto records = read_trace(path);
  std::unique_ptr<PersistentCache> cache;
  std::filesystem::path cache_path = options.cache_path.value_or(default_cache_path());
  if (!cache_path.empty()) cache = std::make_unique<PersistentCache>(cache_path);

  std::vector<TuneResult> results;
  std::set<std::string> done;
  for (const auto& rec : records) {
    std::string device_name = !options.device.empty() ? options.device
                              : !rec.device.empty()   ? rec.device
                                                      : default_device_name();
    std::string key = device_name + "\n" + rec.invocation.kernel + "\n" + rec.invocation.signature();
    if (!done.insert(key).second) continue;
    TuneResult r;
    try {
      auto device = open_device(device_name);
      r = tune(rec.invocation, *device, options.tune);
      if (cache && r.tuned) {
        try {
          cache->put(r.entry, r.measurements, DeviceRecord::of(device->info()));
        } catch (const Error& e) {
          r.report += "not stored in " + cache_path.string() + ": " + e.what() + "\n";
        }
      }
    } catch (const Error& e) {
      // This line cannot be tuned here; the batch goes on.
      r = TuneResult{};
      r.invocation = rec.invocation;
      r.device = device_name;
      r.tuned = false;
      r.report = rec.invocation.kernel + " " + rec.invocation.signature() + " on " + device_name +
                 ": not tuned: " + e.what() + "\n";
    }
    if (options.on_result) options.on_result(r);
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace ejk
