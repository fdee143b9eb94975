#include "ejk/measurement.hpp"

#include <cmath>
#include <cstdio>
#include <limits>

#include "core/json_fields.hpp"
#include "ejk/error.hpp"
#include "ejk/json.hpp"

namespace ejk {

std::string_view to_string(Status s) {
  switch (s) {
    case Status::ok: return "ok";
    case Status::compile: return "compile";
    case Status::device_limits: return "device_limits";
    case Status::runtime: return "runtime";
    case Status::validation: return "validation";
    case Status::timeout: return "timeout";
    case Status::skipped: return "skipped";
  }
  return "?";
}

Status parse_status(std::string_view name) {
  for (Status s : {Status::ok, Status::compile, Status::device_limits, Status::runtime, Status::validation,
                   Status::timeout, Status::skipped})
    if (to_string(s) == name) return s;
  throw InvalidArgument("unknown measurement status '" + std::string(name) + "'");
}

nlohmann::json Stats::to_json() const {
  return {{"median_ns", median_ns}, {"iqr_ns", iqr_ns}, {"min_ns", min_ns}, {"n", n}};
}

Stats Stats::from_json(const nlohmann::json& j) {
  detail::only_keys(j, {"median_ns", "iqr_ns", "min_ns", "n"}, "stats");
  auto time = [&](const char* name) {
    double v = detail::number(detail::member(j, name), name);
    if (v < 0) throw InvalidArgument("'" + std::string(name) + "' must not be negative, got " + json_kind(j.at(name)));
    return v;
  };
  Stats s;
  s.median_ns = time("median_ns");
  s.iqr_ns = time("iqr_ns");
  s.min_ns = time("min_ns");
  s.n = static_cast<int>(detail::integer(detail::member(j, "n"), "n", 0, std::numeric_limits<int>::max()));
  return s;
}

std::string implausible(const Stats& s) {
  auto ns = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g ns", v);
    return std::string(buf);
  };
  if (s.n < 1) return "no samples (n " + std::to_string(s.n) + ")";
  if (!std::isfinite(s.median_ns) || !std::isfinite(s.iqr_ns) || !std::isfinite(s.min_ns))
    return "statistics that are not finite numbers";
  if (s.median_ns < min_plausible_ns) return "a median of " + ns(s.median_ns) + ", below " + ns(min_plausible_ns);
  if (s.median_ns > max_plausible_ns) return "a median of " + ns(s.median_ns) + ", above " + ns(max_plausible_ns);
  if (s.min_ns < 0 || s.min_ns > s.median_ns)
    return "a minimum of " + ns(s.min_ns) + ", outside 0 to its median of " + ns(s.median_ns);
  if (s.iqr_ns < 0 || s.iqr_ns > max_plausible_ns)
    return "an interquartile range of " + ns(s.iqr_ns) + ", outside 0 to " + ns(max_plausible_ns);
  return "";
}

nlohmann::json Measurement::to_json() const {
  nlohmann::json j{{"config", config.to_json()}, {"status", to_string(status)}, {"stats", stats.to_json()},
                   {"error", error},             {"message", message}};
  if (!samples_ns.empty()) j["samples_ns"] = samples_ns;
  return j;
}

Measurement Measurement::from_json(const nlohmann::json& j) {
  Measurement m;
  m.config = Config::from_json(j.at("config"));
  m.status = parse_status(j.at("status").get<std::string>());
  m.stats = Stats::from_json(j.at("stats"));
  m.error = j.value("error", 0.0);
  m.message = j.value("message", "");
  if (j.contains("samples_ns")) m.samples_ns = j.at("samples_ns").get<std::vector<double>>();
  return m;
}

nlohmann::json Provenance::to_json() const {
  return {{"tool_version", tool_version}, {"strategy", strategy},       {"host", host},
          {"created_unix", created_unix}, {"evaluations", evaluations}, {"seed", seed}};
}

Provenance Provenance::from_json(const nlohmann::json& j) {
  detail::only_keys(j, {"tool_version", "strategy", "host", "created_unix", "evaluations", "seed"}, "provenance");
  Provenance p;
  auto has = [&](const char* name) { return j.contains(name); };
  if (has("tool_version")) p.tool_version = detail::text(j.at("tool_version"), "tool_version");
  if (has("strategy")) p.strategy = detail::text(j.at("strategy"), "strategy");
  if (has("host")) p.host = detail::text(j.at("host"), "host");
  if (has("created_unix"))
    p.created_unix = detail::integer(j.at("created_unix"), "created_unix", 0, std::numeric_limits<std::int64_t>::max());
  if (has("evaluations"))
    p.evaluations =
        static_cast<int>(detail::integer(j.at("evaluations"), "evaluations", 0, std::numeric_limits<int>::max()));
  if (has("seed")) p.seed = detail::unsigned_integer(j.at("seed"), "seed");
  return p;
}

std::string CacheEntry::key() const { return fingerprint + "\n" + kernel + "\n" + version + "\n" + signature; }

nlohmann::json CacheEntry::to_json() const {
  return {{"fingerprint", fingerprint}, {"kernel", kernel},         {"version", version},
          {"signature", signature},     {"config", config.to_json()}, {"stats", stats.to_json()},
          {"provenance", provenance.to_json()}};
}

CacheEntry CacheEntry::from_json(const nlohmann::json& j) {
  try {
    if (!j.is_object()) throw InvalidArgument("a cache entry is an object, got " + json_kind(j));
    detail::only_keys(j, {"fingerprint", "kernel", "version", "signature", "config", "stats", "provenance"}, "the entry");
    auto identity = [&](const char* name, std::size_t max_bytes) {
      std::string s = detail::text(detail::member(j, name), name, max_bytes);
      if (s.empty()) throw InvalidArgument("'" + std::string(name) + "' is empty");
      return s;
    };
    CacheEntry e;
    e.fingerprint = identity("fingerprint", 4096);
    e.kernel = identity("kernel", 256);
    e.version = identity("version", 256);
    e.signature = identity("signature", max_signature_bytes);
    e.config = Config::from_json(detail::member(j, "config"));
    e.stats = Stats::from_json(detail::member(j, "stats"));
    e.provenance = Provenance::from_json(detail::member(j, "provenance"));
    return e;
  } catch (const InvalidArgument& ex) {
    throw InvalidArgument(std::string("malformed cache entry: ") + ex.what());
  } catch (const nlohmann::json::exception& ex) {
    throw InvalidArgument(std::string("malformed cache entry: ") + ex.what());
  }
}

}  // namespace ejk
