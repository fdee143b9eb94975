#pragma once
// What tuning produces and caches store: per-candidate measurements and the best entry per key.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ejk/config.hpp"
#include "ejk/export.hpp"

namespace ejk {

// Outcome of one candidate. Failures are results, never aborts.
enum class Status : std::uint8_t { ok, compile, device_limits, runtime, validation, timeout, skipped };

EJK_API std::string_view to_string(Status s);
EJK_API Status parse_status(std::string_view name);  // throws InvalidArgument

// Device-clock timing statistics of one candidate, in nanoseconds.
struct EJK_API Stats {
  double median_ns = 0;
  double iqr_ns = 0;
  double min_ns = 0;
  int n = 0;  // samples
  nlohmann::json to_json() const;
  static Stats from_json(const nlohmann::json& j);  // throws InvalidArgument
};

// What a measured config's statistics must satisfy to enter the persistent cache, from a tuner
// or from a bundle: at least one sample, 1 ns <= median <= 1 hour, 0 <= min <= median,
// 0 <= IQR <= 1 hour. Nothing is launched and finished in less than a nanosecond (a few clock
// cycles), and nothing a tuner times over and over takes an hour; a median outside is a broken
// timer or an edited file. A single sample may read 0 on a coarse device clock, so min may.
inline constexpr double min_plausible_ns = 1;
inline constexpr double max_plausible_ns = 3.6e12;
// Why `s` is not a plausible measurement, or "" when it is.
EJK_API std::string implausible(const Stats& s);

struct EJK_API Measurement {
  Config config;
  Status status = Status::ok;
  Stats stats;          // meaningful when status == ok
  double error = 0;     // relative error against the reference (or trusted config)
  std::string message;  // why it failed, for failures
  // Raw timing samples when the measurer keeps them (comparisons need them); caches do not
  // store them, and to_json writes them only when present.
  std::vector<double> samples_ns;
  nlohmann::json to_json() const;
  static Measurement from_json(const nlohmann::json& j);
};

// Where a cached answer came from.
struct EJK_API Provenance {
  std::string tool_version;
  std::string strategy;  // "exhaustive", "anneal", ... or "import:<bundle>"
  std::string host;
  std::int64_t created_unix = 0;
  int evaluations = 0;
  std::uint64_t seed = 0;
  nlohmann::json to_json() const;
  static Provenance from_json(const nlohmann::json& j);  // throws InvalidArgument
};

// The longest invocation signature an entry may carry (it lists every argument's shape).
inline constexpr std::size_t max_signature_bytes = 65536;

// The best measured config for one invocation key.
struct EJK_API CacheEntry {
  std::string fingerprint;  // device
  std::string kernel;
  std::string version;    // kernel version
  std::string signature;  // invocation signature
  Config config;
  Stats stats;
  Provenance provenance;

  std::string key() const;  // == invocation_key(...) for the same parts
  nlohmann::json to_json() const;
  // Exact types and ranges; identity fields non-empty and free of control characters; unknown
  // keys refused. Throws InvalidArgument.
  static CacheEntry from_json(const nlohmann::json& j);
};

}  // namespace ejk
