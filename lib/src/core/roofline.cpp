// Ceilings in JSON and the roofline they draw (ejk/ceilings.hpp).
#include <cmath>

#include <fmt/core.h>

#include "ejk/ceilings.hpp"
#include "ejk/error.hpp"
#include "ejk/json.hpp"

namespace ejk {

double Ceilings::peak_flops(DType t) const {
  if (auto it = matmul.find(t); it != matmul.end()) return it->second.per_second;
  if (auto it = matmul.find(DType::f32); it != matmul.end()) return it->second.per_second;
  return 0;
}

nlohmann::json Ceilings::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  nlohmann::json how = nlohmann::json::object();
  if (copy) {
    j["GB/s"] = copy->per_second / 1e9;
    how["copy"] = copy->how;
  }
  if (!matmul.empty()) {
    nlohmann::json flops = nlohmann::json::object();
    for (const auto& [t, f] : matmul) {
      flops[std::string(to_string(t))] = f.per_second / 1e9;
      how["matmul/" + std::string(to_string(t))] = f.how;
    }
    j["GFLOP/s"] = flops;
  }
  j["how"] = how;
  j["measured_unix"] = measured_unix;
  return j;
}

namespace {

// A rate read from a file: a positive finite number.
double rate_of(const nlohmann::json& v, const std::string& what) {
  if (!v.is_number()) throw InvalidArgument("ceilings: " + what + " must be a number, got " + json_kind(v));
  const double x = v.get<double>();
  if (!(x > 0) || !std::isfinite(x)) throw InvalidArgument("ceilings: " + what + " must be a positive rate, got " + v.dump());
  return x;
}

std::string how_of(const nlohmann::json& how, const std::string& key) {
  if (!how.contains(key)) return "";
  if (!how.at(key).is_string()) throw InvalidArgument("ceilings: how." + key + " must be a string");
  return how.at(key).get<std::string>();
}

}  // namespace

Ceilings Ceilings::from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw InvalidArgument("ceilings must be an object, got " + json_kind(j));
  const nlohmann::json how = j.contains("how") ? j.at("how") : nlohmann::json::object();
  if (!how.is_object()) throw InvalidArgument("ceilings: 'how' must be an object, got " + json_kind(how));
  Ceilings c;
  if (j.contains("GB/s")) c.copy = Figure{rate_of(j.at("GB/s"), "'GB/s'") * 1e9, how_of(how, "copy")};
  if (j.contains("GFLOP/s")) {
    const auto& flops = j.at("GFLOP/s");
    if (!flops.is_object()) throw InvalidArgument("ceilings: 'GFLOP/s' must be an object of dtype -> rate, got " + json_kind(flops));
    for (const auto& [name, v] : flops.items())
      c.matmul[parse_dtype(name)] = Figure{rate_of(v, "GFLOP/s." + name) * 1e9, how_of(how, "matmul/" + name)};
  }
  if (j.contains("measured_unix")) {
    if (!j.at("measured_unix").is_number_integer()) throw InvalidArgument("ceilings: 'measured_unix' must be an integer");
    c.measured_unix = j.at("measured_unix").get<std::int64_t>();
  }
  return c;
}

nlohmann::json Roofline::to_json() const {
  nlohmann::json j = {{"share", share}, {"bound", compute_bound ? "compute" : "memory"}, {"intensity", intensity}};
  if (compute_bound) j["attainable_GFLOP/s"] = attainable / 1e9;
  else j["attainable_GB/s"] = attainable / 1e9;
  return j;
}

std::string Roofline::describe() const {
  return fmt::format("{:.0f}% of roofline ({}-bound)", 100 * share, compute_bound ? "compute" : "memory");
}

std::optional<Roofline> roofline(const Ceilings& c, DType t, double flops, double bytes, double ns) {
  if (!(ns > 0) || !(flops > 0 || bytes > 0)) return std::nullopt;
  const double peak = c.peak_flops(t), bw = c.bandwidth();
  Roofline r;
  if (flops > 0 && bytes > 0) {
    if (peak <= 0 || bw <= 0) return std::nullopt;
    r.intensity = flops / bytes;
    r.compute_bound = peak <= r.intensity * bw;
  } else {
    r.compute_bound = flops > 0;
    if ((r.compute_bound ? peak : bw) <= 0) return std::nullopt;
  }
  // The same share either way: FLOP/s against the peak, or bytes/s against the bandwidth.
  r.attainable = r.compute_bound ? peak : bw;
  r.share = (r.compute_bound ? flops : bytes) / (ns * 1e-9) / r.attainable;
  return r;
}

}  // namespace ejk
