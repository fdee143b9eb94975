// Batch tuning of a recorded trace (EJK_RECORD=trace.jsonl).
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "ejk/bundle.hpp"
#include "ejk/cache.hpp"
#include "ejk/error.hpp"
#include "ejk/json.hpp"
#include "ejk/registry.hpp"
#include "ejk/text.hpp"
#include "ejk/tuner.hpp"

namespace ejk {

namespace {

// One line, read no further than the limit (a huge line is refused without being held); false
// at the end of the file.
bool next_line(std::streambuf& in, std::string& line, bool& too_long) {
  line.clear();
  too_long = false;
  bool any = false;
  for (int c; (c = in.sbumpc()) != std::char_traits<char>::eof();) {
    any = true;
    if (c == '\n') return true;
    if (line.size() == TraceLimits::max_line_bytes) {
      too_long = true;
      return true;
    }
    line.push_back(static_cast<char>(c));
  }
  return any;
}

std::string text_field(const nlohmann::json& j, const char* key) {
  if (!j.contains(key)) return {};
  const auto& v = j.at(key);
  if (!v.is_string()) throw InvalidArgument(std::string("'") + key + "' must be text, got " + v.dump());
  const auto& s = v.get_ref<const std::string&>();
  for (char ch : s)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7F)
      throw InvalidArgument(std::string("'") + key + "' holds a control character");
  return s;
}

}  // namespace

std::vector<TraceRecord> read_trace(const std::string& path) {
  auto unreadable = [&](const std::string& why) { return IoError("cannot read trace " + path + ": " + why); };
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw unreadable("it is a folder");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw unreadable(std::strerror(errno));
  static const std::set<std::string> known{"kernel", "args",      "options",     "scalars", "device",
                                           "version", "tier",     "signature",   "fingerprint", "origin"};
  static constexpr JsonLimits limits{.max_bytes = TraceLimits::max_line_bytes, .max_depth = TraceLimits::max_depth};
  std::vector<TraceRecord> out;
  std::string line;
  bool too_long = false;
  int number = 0;
  while (next_line(*in.rdbuf(), line, too_long)) {
    ++number;
    const std::string where = path + ":" + std::to_string(number);
    if (too_long)
      throw IoError(where + ": the line is longer than the limit of " + std::to_string(TraceLimits::max_line_bytes) +
                    " bytes");
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = parse_json(line, path, limits, static_cast<std::size_t>(number));
    } catch (const InvalidArgument& e) {
      throw IoError(e.what());  // already path:line:col
    }
    try {
      if (!j.is_object()) throw InvalidArgument("not a JSON object");
      for (const auto& [key, _] : j.items())
        if (!known.count(key)) {
          std::string list;
          for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
          throw InvalidArgument("unknown key '" + printable(key) + "' (allowed: " + list + ")");
        }
      TraceRecord r;
      r.invocation = Invocation::from_json(j);
      (void)text_field(j, "kernel");
      r.device = text_field(j, "device");
      r.version = text_field(j, "version");
      r.tier = text_field(j, "tier");
      for (const char* key : {"signature", "fingerprint", "origin"}) (void)text_field(j, key);
      r.line = number;
      out.push_back(std::move(r));
    } catch (const nlohmann::json::exception& e) {
      throw IoError(where + ": " + printable(e.what()));
    } catch (const InvalidArgument& e) {
      throw IoError(where + ": " + e.what());
    }
  }
  if (in.bad()) throw unreadable(std::strerror(errno));
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
