#include "tune/bench.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "core/difference.hpp"
#include "core/element.hpp"
#include "core/parts.hpp"
#include "ejk/error.hpp"
#include "ejk/registry.hpp"
#include "tune/stats.hpp"

namespace ejk::tuning {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The byte a canary holds at position i: varied, so a kernel writing a constant or a copy of
// its neighbour cannot leave it intact by chance.
std::byte canary_byte(std::size_t i) { return static_cast<std::byte>((i * 151u + 89u) & 0xffu); }

std::vector<std::byte> canary(std::size_t n) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = canary_byte(i);
  return v;
}

// With EJK_LOG_TUNE=1, one line per candidate on stderr with where its time went.
class Phases {
 public:
  explicit Phases(const Config& c) : Phases("measure " + c.canonical()) {}
  explicit Phases(std::string what) : on_(log_on()), config_(on_ ? std::move(what) : "") {}
  ~Phases() {
    if (on_) std::fprintf(stderr, "ejk: %s:%s\n", config_.c_str(), text_.c_str());
  }
  void next(const std::string& what) {
    if (!on_) return;
    const auto now = Clock::now();
    char buf[96];
    std::snprintf(buf, sizeof buf, " %s %.1f ms,", what.c_str(), std::chrono::duration<double, std::milli>(now - t_).count());
    text_ += buf;
    t_ = now;
  }

 private:
  static bool log_on() {
    const char* v = std::getenv("EJK_LOG_TUNE");
    return v && std::string_view(v) == "1";
  }
  bool on_;
  std::string config_, text_;
  Clock::time_point t_ = Clock::now();
};

std::string format_g(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

}  // namespace

nlohmann::json timing_to_json(const TimingOptions& t) {
  return {{"warmup_seconds", t.warmup_seconds}, {"min_samples", t.min_samples},
          {"max_samples", t.max_samples},       {"max_seconds", t.max_seconds},
          {"max_spread", t.max_spread},         {"abandon_ratio", t.abandon_ratio},
          {"flush_bytes", t.flush_bytes},       {"max_input_sets", t.max_input_sets},
          {"rerank_top", t.rerank_top},         {"rerank_rounds", t.rerank_rounds}};
}

TimingOptions timing_from_json(const nlohmann::json& j) {
  TimingOptions t;
  t.warmup_seconds = j.value("warmup_seconds", t.warmup_seconds);
  t.min_samples = j.value("min_samples", t.min_samples);
  t.max_samples = j.value("max_samples", t.max_samples);
  t.max_seconds = j.value("max_seconds", t.max_seconds);
  t.max_spread = j.value("max_spread", t.max_spread);
  t.abandon_ratio = j.value("abandon_ratio", t.abandon_ratio);
  t.flush_bytes = j.value("flush_bytes", t.flush_bytes);
  t.max_input_sets = j.value("max_input_sets", t.max_input_sets);
  t.rerank_top = j.value("rerank_top", t.rerank_top);
  t.rerank_rounds = j.value("rerank_rounds", t.rerank_rounds);
  return t;
}

nlohmann::json BenchSettings::to_json() const {
  return {{"timing", timing_to_json(timing)},
          {"validate", validate},
          {"reference_flops_limit", reference_flops_limit},
          {"input_seed", input_seed},
          {"trusted", trusted ? trusted->to_json() : nlohmann::json()},
          {"trusted_failed", trusted_failed}};
}

BenchSettings BenchSettings::from_json(const nlohmann::json& j) {
  BenchSettings s;
  if (j.contains("timing")) s.timing = timing_from_json(j.at("timing"));
  s.validate = j.value("validate", true);
  s.reference_flops_limit = j.value("reference_flops_limit", s.reference_flops_limit);
  s.input_seed = j.value("input_seed", s.input_seed);
  if (j.contains("trusted") && !j.at("trusted").is_null()) s.trusted = Config::from_json(j.at("trusted"));
  s.trusted_failed = j.value("trusted_failed", false);
  return s;
}

Measurement failure(const Config& c, Status status, std::string message) {
  Measurement m;
  m.config = c;
  m.status = status;
  m.message = std::move(message);
  return m;
}

Measurement classify(const Config& c, const std::exception_ptr& e, std::string_view when) {
  std::string prefix = when.empty() ? "" : std::string(when) + ": ";
  try {
    std::rethrow_exception(e);
  } catch (const CompileError& ex) {
    return failure(c, Status::compile, prefix + ex.what());
  } catch (const ResourceError& ex) {
    return failure(c, Status::device_limits, prefix + ex.what());
  } catch (const std::exception& ex) {
    return failure(c, Status::runtime, prefix + ex.what());
  } catch (...) {
    return failure(c, Status::runtime, prefix + "unknown exception");
  }
}

Bench::Bench(const Invocation& inv, const Implementation& impl, Device& device, BenchSettings settings)
    : Bench(inv, Registry::global().kernel(inv.kernel), impl, device, std::move(settings)) {}

Bench::Bench(const Invocation& inv, const Kernel& kernel, const Implementation& impl, Device& device,
             BenchSettings settings)
    : inv_(inv),
      kernel_(kernel),
      impl_(impl),
      device_(device),
      settings_(std::move(settings)) {
  kernel_.validate(inv_);
  for (const auto& a : kernel_.args()) {
    roles_.push_back(a.role);
    names_.push_back(a.name);
  }
  if (roles_.size() != inv_.args.size())
    throw InvalidArgument(inv_.kernel + " takes " + std::to_string(roles_.size()) + " arguments, the invocation has " +
                          std::to_string(inv_.args.size()));
  Phases phases("bench setup");
  // Tensors need a shared_ptr; the device outlives this bench, so a non-owning one will do.
  std::shared_ptr<Device> dev(std::shared_ptr<Device>(), &device_);

  std::size_t set_bytes = 0;
  Set first;
  for (std::size_t i = 0; i < inv_.args.size(); ++i) {
    const auto& spec = inv_.args[i];
    const std::size_t bytes = static_cast<std::size_t>(numel(spec.shape)) * dtype_size(spec.dtype);
    set_bytes += bytes;
    // Enough canary to catch the first tile of an overrun, bounded so big tensors stay cheap.
    spare_.push_back((std::clamp<std::size_t>(bytes / 8, 4096, std::size_t{1} << 20) + 63) / 64 * 64);
    first.args.push_back(Tensor::with_spare(dev, spec.shape, spec.dtype, spare_[i]));
  }
  // Made on the device: host memory stays O(index arrays) whatever the tensors' sizes.
  phases.next("allocate");
  kernel_.make_inputs(inv_, settings_.input_seed, first.args);
  phases.next("inputs");
  for (std::size_t i = 0; i < inv_.args.size(); ++i) {
    const Tensor& t = first.args[i];
    if (roles_[i] == Role::inout) {
      Tensor copy(dev, t.shape(), t.dtype());
      if (t.bytes() > 0) device_.copy(t.buffer(), copy.buffer(), t.bytes());
      pristine_dev_.push_back(copy);
    } else {
      pristine_dev_.emplace_back();
    }
    // All-ones bytes are NaN in every float format (-1 in i32): what a kernel leaves unwritten
    // fails. Written once a slice at a time, then copied on the device before each candidate.
    poison_dev_.emplace_back();
    if (roles_[i] == Role::out && t.bytes() > 0) {
      poison_dev_.back() = Tensor(dev, t.shape(), t.dtype());
      const std::vector<std::byte> ones(std::min<std::size_t>(t.bytes(), std::size_t{4} << 20), std::byte{0xff});
      for (std::size_t at = 0; at < t.bytes(); at += ones.size())
        device_.write(poison_dev_.back().buffer(), at, ones.data(), std::min(ones.size(), t.bytes() - at));
    }
  }
  sets_.push_back(std::move(first));
  samples_ = input_samples();
  set_bytes = std::max<std::size_t>(set_bytes, 1);
  phases.next("samples and poison");

  const DeviceInfo& info = device_.info();
  std::int64_t flush = settings_.timing.flush_bytes;
  if (flush < 0) flush = info.backend == Backend::cpu ? std::int64_t{64} << 20 : std::int64_t{128} << 20;
  if (info.global_mem) flush = std::min<std::int64_t>(flush, static_cast<std::int64_t>(info.global_mem / 4));
  std::size_t sets = 1;
  if (flush > 0) {
    sets = (static_cast<std::size_t>(flush) + set_bytes - 1) / set_bytes;
    sets = std::clamp<std::size_t>(sets, 1, static_cast<std::size_t>(std::max(1, settings_.timing.max_input_sets)));
  }
  arm_canaries(sets_[0]);
  for (std::size_t s = 1; s < sets; ++s) {
    Set set;
    for (std::size_t i = 0; i < inv_.args.size(); ++i) {
      const auto& spec = inv_.args[i];
      Tensor t = Tensor::with_spare(dev, spec.shape, spec.dtype, spare_[i]);
      if (roles_[i] != Role::out && t.bytes() > 0) device_.copy(sets_[0].args[i].buffer(), t.buffer(), t.bytes());
      set.args.push_back(std::move(t));
    }
    arm_canaries(set);
    sets_.push_back(std::move(set));
  }
  // What the sets cannot cover is evicted by copying a scratch buffer between samples.
  std::size_t covered = sets * set_bytes;
  if (flush > 0 && static_cast<std::size_t>(flush) > covered) {
    std::size_t half = (static_cast<std::size_t>(flush) - covered) / 2 / 4 * 4;
    auto max_buf = info.max_buffer ? static_cast<std::size_t>(info.max_buffer) : half;
    half = std::min(half, max_buf);
    if (half >= 4096) {
      Shape shape{static_cast<std::int64_t>(half / 4)};
      Tensor src(dev, shape, DType::f32), dst(dev, shape, DType::f32);
      // Written once: untouched pages may all map to one zero page and never leave the cache.
      std::vector<std::byte> fill(half);
      for (std::size_t i = 0; i < half; ++i) fill[i] = static_cast<std::byte>(i * 7 + 1);
      src.write_bytes(fill);
      scratch_ = {src, dst};
    }
  }
  next_set_ = sets > 1 ? 1 : 0;
  phases.next(std::to_string(sets) + " sets and scratch");
}

void Bench::arm_canaries(const Set& set) const {
  for (std::size_t i = 0; i < set.args.size(); ++i) {
    auto pattern = canary(spare_[i]);
    device_.write(set.args[i].buffer(), set.args[i].bytes(), pattern.data(), pattern.size());
  }
}

std::string Bench::damaged_canary(const Set& set) const {
  std::vector<std::vector<std::byte>> got(set.args.size());
  std::vector<ReadRange> ranges;
  for (std::size_t i = 0; i < set.args.size(); ++i) {
    got[i].resize(spare_[i]);
    ranges.push_back({&set.args[i].buffer(), set.args[i].bytes(), got[i].size(), got[i].data()});
  }
  device_.read_ranges(ranges);
  for (std::size_t i = 0; i < set.args.size(); ++i)
    for (std::size_t j = 0; j < got[i].size(); ++j)
      if (got[i][j] != canary_byte(j)) {
        std::size_t last = j;
        for (std::size_t k = j; k < got[i].size(); ++k)
          if (got[i][k] != canary_byte(k)) last = k;
        return "wrote past the end of " + names_[i] + " " + to_string(inv_.args[i].shape) + ": canary bytes " +
               std::to_string(j) + ".." + std::to_string(last) + " after its end changed";
      }
  return {};
}

std::vector<std::vector<std::byte>> Bench::input_samples() const {
  std::vector<std::vector<std::byte>> out(roles_.size());
  std::vector<ReadRange> ranges;
  for (std::size_t i = 0; i < roles_.size(); ++i) {
    if (roles_[i] != Role::in) continue;
    const Tensor& t = sets_[0].args[i];
    const std::size_t bytes = t.bytes();
    if (bytes <= whole_sample_bytes) {
      out[i].resize(bytes);
      ranges.push_back({&t.buffer(), 0, bytes, out[i].data()});
      continue;
    }
    // Chunks spread evenly from the first byte to the last.
    out[i].resize(sample_chunks * chunk_bytes);
    for (std::size_t c = 0; c < sample_chunks; ++c)
      ranges.push_back({&t.buffer(), (bytes - chunk_bytes) / (sample_chunks - 1) * c, chunk_bytes, out[i].data() + c * chunk_bytes});
  }
  device_.read_ranges(ranges);
  return out;
}

std::string Bench::modified_input() {
  const std::vector<std::vector<std::byte>> now = input_samples();
  for (std::size_t i = 0; i < roles_.size(); ++i) {
    if (now[i] != samples_[i]) {
      // Made again for the candidates after this one (outputs and canaries are reset before each).
      kernel_.make_inputs(inv_, settings_.input_seed, sets_[0].args);
      return "modified its input " + names_[i];
    }
  }
  return {};
}

void Bench::reset_set0() {
  const Set& set = sets_[0];
  for (std::size_t i = 0; i < set.args.size(); ++i) {
    const Tensor& t = set.args[i];
    if (t.bytes() == 0) continue;
    if (roles_[i] == Role::inout) {
      device_.copy(pristine_dev_[i].buffer(), t.buffer(), t.bytes());
    } else if (roles_[i] == Role::out) {
      device_.copy(poison_dev_[i].buffer(), t.buffer(), t.bytes());
    }
  }
  arm_canaries(set);
}

void Bench::restore(const Set& set) {
  for (std::size_t i = 0; i < set.args.size(); ++i)
    if (roles_[i] == Role::inout && set.args[i].bytes() > 0)
      device_.copy(pristine_dev_[i].buffer(), set.args[i].buffer(), set.args[i].bytes());
}

std::string Bench::check_outputs(double& error) const {
  error = 0;
  std::size_t o = 0;
  for (std::size_t i = 0; i < roles_.size(); ++i) {
    if (roles_[i] == Role::in) continue;
    const Tensor& out = sets_[0].args[i];
    const std::int64_t n = out.numel();
    const DType t = out.dtype();
    const std::vector<double>* want_host = expected_.empty() ? nullptr : &expected_[o];
    const Tensor* want_dev = expected_dev_.empty() ? nullptr : &expected_dev_[o];
    ++o;
    if (want_host && static_cast<std::int64_t>(want_host->size()) != n)
      throw Error("reference of " + names_[i] + " has " + std::to_string(want_host->size()) + " values, expected " +
                  std::to_string(n));
    // Small problems against the host reference, a slice at a time on every core; otherwise
    // against the trusted output kept on the device, or only finiteness, reduced on the device
    // where the backend can, so a few bytes come back whatever the output's size.
    const Difference d = want_host ? difference_in_slices(device_, out.buffer(), nullptr, want_host->data(), t, n)
                                   : device_.difference(out.buffer(), want_dev ? &want_dev->buffer() : nullptr, t, n);
    if (d.bad >= 0) {
      const double got = out.read<double>(d.bad, 1)[0];
      if (!want_host && !want_dev && std::isinf(got)) {
        // Nothing to compare with yet (the trusted config's or the first candidate's run): an
        // infinity may be what the kernel defines (the log-sum-exp of a row with no key is
        // -inf), so only a NaN is wrong, looked for over the whole output. The outputs kept from
        // this run then carry the infinity that later candidates must match.
        const std::vector<double> all = out.read();
        const auto nan = std::find_if(all.begin(), all.end(), [](double x) { return std::isnan(x); });
        if (nan == all.end()) continue;
        return "NaN in " + names_[i] + " at element " + std::to_string(nan - all.begin());
      }
      const double want = want_host ? (*want_host)[static_cast<std::size_t>(d.bad)] : want_dev ? want_dev->read<double>(d.bad, 1)[0] : 0;
      if (!std::isfinite(got) && !std::isinf(want))
        return (std::isnan(got) ? "NaN" : "Inf") + std::string(" in ") + names_[i] + " at element " + std::to_string(d.bad);
      return names_[i] + " at element " + std::to_string(d.bad) + " is " + format_g(got) + ", expected " + format_g(want);
    }
    if (!want_host && !want_dev) continue;
    const double rel = d.scale > 0 ? d.err / d.scale : d.err;
    error = std::max(error, rel);
    if (rel > tolerance_)
      return names_[i] + " differs from the " + (validated_ == "reference" ? "reference" : "trusted output") +
             ": relative error " + format_g(rel) + " > tolerance " + format_g(tolerance_);
  }
  return check_sampled(error);
}

std::string Bench::check_sampled(double& error) const {
  const double tolerance = kernel_.tolerance(inv_);
  for (const SampledOutput& s : sampled_) {
    const Tensor& out = sets_[0].args[s.arg];
    const DType t = out.dtype();
    const std::size_t size = dtype_size(t);
    double err = 0, scale = 0;
    // Runs of consecutive elements, one range each, all read at once.
    std::vector<std::byte> got_bytes(s.index.size() * size);
    std::vector<ReadRange> ranges;
    for (std::size_t a = 0; a < s.index.size();) {
      std::size_t b = a + 1;
      while (b < s.index.size() && s.index[b] == s.index[b - 1] + 1) ++b;
      ranges.push_back({&out.buffer(), static_cast<std::size_t>(s.index[a]) * size, (b - a) * size, got_bytes.data() + a * size});
      a = b;
    }
    device_.read_ranges(ranges);
    for (std::size_t j = 0; j < s.index.size(); ++j) {
      const double got = load_element(t, got_bytes.data() + j * size), want = s.value[j];
      if (std::isinf(want) && got == want) continue;
      if (!std::isfinite(got) || !std::isfinite(want))
        return names_[s.arg] + " at element " + std::to_string(s.index[j]) + " is " + format_g(got) + ", the reference gives " +
               format_g(want);
      err = std::max(err, std::abs(got - want));
      scale = std::max(scale, std::abs(want));
    }
    const double rel = scale > 0 ? err / scale : err;
    error = std::max(error, rel);
    if (rel > tolerance)
      return names_[s.arg] + " differs from the reference at " + std::to_string(s.index.size()) +
             " sampled elements: relative error " + format_g(rel) + " > tolerance " + format_g(tolerance);
  }
  return {};
}

void Bench::take_samples() {
  ArgReader read = [this](std::size_t arg, std::int64_t first, std::int64_t count) {
    if (arg >= roles_.size() || roles_[arg] == Role::out)
      throw Error(inv_.kernel + "'s sampled reference read argument " + std::to_string(arg) + ", which is not an input");
    const Tensor& t = roles_[arg] == Role::inout ? pristine_dev_[arg] : sets_[0].args[arg];
    return t.read<double>(first, count);
  };
  sampled_ = kernel_.sampled_reference(inv_, read);
  for (const SampledOutput& s : sampled_) {
    const bool fits = s.arg < roles_.size() && roles_[s.arg] != Role::in && s.index.size() == s.value.size() &&
                      std::is_sorted(s.index.begin(), s.index.end()) &&
                      std::adjacent_find(s.index.begin(), s.index.end()) == s.index.end() &&
                      (s.index.empty() || (s.index.front() >= 0 && s.index.back() < sets_[0].args[s.arg].numel()));
    if (!fits) throw Error(inv_.kernel + "'s sampled reference names elements that argument " + std::to_string(s.arg) + " does not have");
  }
}

std::string Bench::with_samples(std::string what) const {
  std::size_t n = 0;
  for (const SampledOutput& s : sampled_) n += s.index.size();
  return n ? what + " and the reference at " + std::to_string(n) + " sampled elements" : what;
}

void Bench::keep_outputs() {
  std::shared_ptr<Device> dev(std::shared_ptr<Device>(), &device_);
  expected_dev_.clear();
  for (std::size_t i = 0; i < roles_.size(); ++i) {
    if (roles_[i] == Role::in) continue;
    const Tensor& t = sets_[0].args[i];
    Tensor copy(dev, t.shape(), t.dtype());
    if (t.bytes() > 0) device_.copy(t.buffer(), copy.buffer(), t.bytes());
    expected_dev_.push_back(copy);
  }
  device_.synchronize();
}

void Bench::prepare() {
  prepared_ = true;
  if (!settings_.validate) {
    validated_ = "off";
    return;
  }
  tolerance_ = kernel_.tolerance(inv_);
  bool large = kernel_.flops(inv_) > settings_.reference_flops_limit;
  if (large && settings_.trusted) take_samples();
  if (large && settings_.trusted_failed) {
    tolerance_ *= 2;
    validated_ = "pending";
    return;
  }
  if (!large || !settings_.trusted) {
    // The inputs as the device holds them; outputs start as zeros (a reference reads only its inputs).
    HostArrays host;
    for (std::size_t i = 0; i < roles_.size(); ++i)
      host.push_back(roles_[i] == Role::out ? std::vector<double>(static_cast<std::size_t>(sets_[0].args[i].numel()), 0.0)
                     : roles_[i] == Role::inout ? pristine_dev_[i].read()
                                                : sets_[0].args[i].read());
    expected_ = kernel_.reference(inv_, host);
    validated_ = "reference";
    return;
  }
  // Both outputs carry rounding error, so the bound doubles.
  tolerance_ *= 2;
  const Config& trusted = *settings_.trusted;
  try {
    reset_set0();
    impl_.run(inv_, trusted, sets_[0].args, device_);
    device_.synchronize();
    double unused = 0;
    std::string bad = check_outputs(unused);
    if (bad.empty()) bad = damaged_canary(sets_[0]);
    if (bad.empty()) {
      keep_outputs();
      validated_ = with_samples("trusted config " + trusted.canonical());
      return;
    }
  } catch (const std::exception&) {
  }
  // The trusted config failed; the first candidate that runs cleanly becomes the yardstick.
  validated_ = "pending";
}

double Bench::time_once(const Config& c) {
  const Set& set = sets_[next_set_];
  next_set_ = (next_set_ + 1) % sets_.size();
  if (scratch_.size() == 2) device_.copy(scratch_[0].buffer(), scratch_[1].buffer(), scratch_[0].bytes());
  double t = device_.time_ns([&] { impl_.run(inv_, c, set.args, device_); });
  last_run_ = Clock::now();
  restore(set);
  return t;
}

std::optional<Bench::SpinUp> Bench::spin_up(const Config& c) {
  if (device_.info().cpu) return std::nullopt;
  if (last_run_ && seconds_since(*last_run_) < spin_idle_seconds) return std::nullopt;
  const auto s0 = Clock::now();
  SpinUp out;
  double previous = 0;
  while (seconds_since(s0) < spin_max_seconds) {
    std::vector<double> window;
    const auto w0 = Clock::now();
    do window.push_back(time_once(c));
    while (seconds_since(w0) < spin_window_seconds);
    const double now = median(window);
    if (out.first_ns == 0) out.first_ns = now;
    const bool settled = previous > 0 && now > 0.98 * previous;
    previous = now;
    if (settled && seconds_since(s0) >= spin_min_seconds) break;
  }
  out.settled_ns = previous;
  return out;
}

Measurement Bench::measure(const Config& c, double best_ns) {
  Phases phases(c);
  if (!prepared_) prepare();
  phases.next("prepare");
  Measurement m;
  m.config = c;
  // On the device's clock, the first run is also the first sample that abandonment looks at:
  // its program builds on the host, outside what the device times.
  double first = 0;
  try {
    reset_set0();
    phases.next("reset");
    first = device_.time_ns([&] { impl_.run(inv_, c, sets_[0].args, device_); });
    phases.next("first run (build included)");
  } catch (...) {
    return classify(c, std::current_exception(), "");
  }
  if (settings_.validate) {
    std::string bad = damaged_canary(sets_[0]);
    if (bad.empty()) bad = modified_input();
    if (bad.empty()) {
      bad = check_outputs(m.error);
      if (bad.empty() && validated_ == "pending") {
        keep_outputs();
        validated_ = with_samples("first clean candidate " + c.canonical());
      }
    }
    if (!bad.empty()) {
      Measurement f = failure(c, Status::validation, bad);
      f.error = m.error;
      return f;
    }
    phases.next("checks");
  }

  const TimingOptions& t = settings_.timing;
  std::vector<double> samples;
  try {
    // A first run on a rested device says nothing about the candidate: after a spin-up its
    // settled speed decides abandonment.
    if (const auto spun = spin_up(c)) {
      first = spun->settled_ns;
      phases.next("spin-up (runs from " + format_g(spun->first_ns / 1e3) + " to " + format_g(spun->settled_ns / 1e3) + " us)");
    }
    if (best_ns > 0 && first > t.abandon_ratio * best_ns) {
      // One more sample confirms it, so a single preempted run on a busy machine does not
      // condemn a good candidate.
      double second = time_once(c);
      if (second > t.abandon_ratio * best_ns) {
        std::vector<double> two{first, second};
        m.stats = summarize(two);
        m.samples_ns = std::move(two);
        m.message = "abandoned after one sample (confirmed by a second): " +
                    format_g(std::min(first, second) / best_ns) + "x the best so far";
        return m;
      }
    }
    auto w0 = Clock::now();
    while (seconds_since(w0) < t.warmup_seconds) time_once(c);
    auto s0 = Clock::now();
    for (;;) {
      samples.push_back(time_once(c));
      int n = static_cast<int>(samples.size());
      double elapsed = seconds_since(s0);
      if (n >= t.max_samples) break;
      if (n >= t.min_samples && spread(summarize(samples)) <= t.max_spread) break;
      if (elapsed >= t.max_seconds && (n >= 3 || elapsed >= 4 * t.max_seconds)) break;
    }
  } catch (...) {
    return classify(c, std::current_exception(), "while timing");
  }
  if (settings_.validate)
    for (const auto& set : sets_) {
      std::string bad = damaged_canary(set);
      if (!bad.empty()) {
        for (const auto& s : sets_) arm_canaries(s);
        return failure(c, Status::validation, bad + " (while timing)");
      }
    }
  m.stats = summarize(samples);
  m.samples_ns = std::move(samples);
  phases.next("timing (" + std::to_string(m.samples_ns.size()) + " samples)");
  return m;
}

void Bench::rerank(const std::vector<Config>& configs, int rounds, std::vector<std::vector<double>>& samples,
                   std::vector<std::string>& errors) {
  samples.assign(configs.size(), {});
  errors.assign(configs.size(), {});
  auto attempt = [&](std::size_t i, bool keep) {
    if (!errors[i].empty()) return;
    try {
      double t = time_once(configs[i]);
      if (keep) samples[i].push_back(t);
    } catch (const std::exception& e) {
      errors[i] = e.what();
    } catch (...) {
      errors[i] = "unknown exception";
    }
  };
  // One untimed run each, so the first round does not pay for whatever the search ran last.
  if (!configs.empty()) try {
      (void)spin_up(configs.front());
    } catch (const std::exception&) {
      // The config's own attempt below records the failure.
    }
  for (std::size_t i = 0; i < configs.size(); ++i) attempt(i, false);
  for (int r = 0; r < rounds; ++r)
    for (std::size_t k = 0; k < configs.size(); ++k) attempt(r % 2 == 0 ? k : configs.size() - 1 - k, true);
}

}  // namespace ejk::tuning
