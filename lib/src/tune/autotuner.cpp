// The tuner as the executor's autotune tier.
#include <cmath>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "ejk/error.hpp"
#include "ejk/executor.hpp"
#include "ejk/tuner.hpp"
#include "select/default_autotuner.hpp"

namespace ejk {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

template <class T, class Parse>
T parse_env(const char* name, const char* text, Parse parse) {
  try {
    std::size_t used = 0;
    T v = parse(std::string(text), &used);
    // stoull reads "-5" as 2^64-5 and stod reads "nan" and "inf": none is a budget or a seed.
    if (used != std::string(text).size() || !(v >= 0) || text[0] == '-') throw std::invalid_argument(text);
    if constexpr (std::is_floating_point_v<T>)
      if (!std::isfinite(v)) throw std::invalid_argument(text);
    return v;
  } catch (const std::exception&) {
    throw InvalidArgument(std::string(name) + "=" + text + " is not a non-negative finite number");
  }
}

}  // namespace

TuneOptions tune_options_from_env() {
  TuneOptions o;
  o.strategy = Strategy::model;
  if (const char* v = env("EJK_TUNE_STRATEGY")) {
    try {
      o.strategy = parse_strategy(v);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(std::string("EJK_TUNE_STRATEGY: ") + e.what());
    }
  }
  if (const char* v = env("EJK_TUNE_EVALS"))
    o.budget.evaluations = parse_env<int>("EJK_TUNE_EVALS", v, [](const std::string& s, std::size_t* n) { return std::stoi(s, n); });
  if (const char* v = env("EJK_TUNE_SECONDS"))
    o.budget.seconds = parse_env<double>("EJK_TUNE_SECONDS", v, [](const std::string& s, std::size_t* n) { return std::stod(s, n); });
  if (const char* v = env("EJK_TUNE_SEED"))
    o.seed = parse_env<unsigned long long>("EJK_TUNE_SEED", v, [](const std::string& s, std::size_t* n) { return std::stoull(s, n); });
  if (const char* v = env("EJK_TUNE_ISOLATE")) {
    std::string s = v;
    if (s != "0" && s != "1") throw InvalidArgument("EJK_TUNE_ISOLATE=" + s + " must be 0 or 1");
    o.isolate = s == "1";
  }
  return o;
}

Autotuner make_autotuner(TuneOptions options) {
  return [options](const Invocation& inv, const Implementation& impl,
                   const std::shared_ptr<Device>& device) -> std::optional<TuneOutcome> {
    TuneResult r = tune(inv, impl, *device, options);
    if (!r.tuned) return std::nullopt;
    return TuneOutcome{r.entry, r.measurements};
  };
}

void install_autotuner(TuneOptions options) { set_autotuner(make_autotuner(std::move(options))); }

namespace {

// The executor's autotuner until set_autotuner replaces it, with the options of the environment.
const select::DefaultAutotunerRegistration registration([] { return make_autotuner(tune_options_from_env()); });

}  // namespace

}  // namespace ejk
