#include "ejk/measurement.hpp"

#include "ejk/error.hpp"

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
  Stats s;
  s.median_ns = j.at("median_ns").get<double>();
  s.iqr_ns = j.at("iqr_ns").get<double>();
  s.min_ns = j.at("min_ns").get<double>();
  s.n = j.at("n").get<int>();
  return s;
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
  Provenance p;
  p.tool_version = j.value("tool_version", "");
  p.strategy = j.value("strategy", "");
  p.host = j.value("host", "");
  p.created_unix = j.value("created_unix", std::int64_t{0});
  p.evaluations = j.value("evaluations", 0);
  p.seed = j.value("seed", std::uint64_t{0});
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
    CacheEntry e;
    e.fingerprint = j.at("fingerprint").get<std::string>();
    e.kernel = j.at("kernel").get<std::string>();
    e.version = j.at("version").get<std::string>();
    e.signature = j.at("signature").get<std::string>();
    e.config = Config::from_json(j.at("config"));
    e.stats = Stats::from_json(j.at("stats"));
    e.provenance = Provenance::from_json(j.at("provenance"));
    return e;
  } catch (const nlohmann::json::exception& ex) {
    throw InvalidArgument(std::string("malformed cache entry: ") + ex.what());
  }
}

}  // namespace ejk
