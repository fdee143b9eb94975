// The executor and its selector chain. Each invocation signature gets a Site on first sight
// (kernel, implementation, version and key computed once); a cache hit is then a hash of the
// invocation, one shared lock and a shared_ptr copy.
#include "ejk/executor.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "ejk/bundle.hpp"
#include "ejk/cache.hpp"
#include "ejk/error.hpp"
#include "ejk/overlay.hpp"
#include "ejk/registry.hpp"
#include "ejk/version.hpp"
#include "select/default_autotuner.hpp"
#include "select/nearest.hpp"
#include "select/profile.hpp"
#include "select/recorder.hpp"
#include "select/trace.hpp"

namespace ejk {

namespace fs = std::filesystem;

std::string_view to_string(Tier t) {
  switch (t) {
    case Tier::override_: return "override";
    case Tier::overlay: return "overlay";
    case Tier::memory: return "memory";
    case Tier::persistent: return "persistent";
    case Tier::profile: return "profile";
    case Tier::autotune: return "autotune";
    case Tier::heuristic: return "heuristic";
  }
  return "?";
}

namespace {
thread_local SelectionRecorder* innermost_recorder = nullptr;
}  // namespace

SelectionRecorder::SelectionRecorder() : outer_(innermost_recorder) { innermost_recorder = this; }

SelectionRecorder::~SelectionRecorder() { innermost_recorder = outer_; }

void SelectionRecorder::record(std::string_view kernel, const std::shared_ptr<const Selection>& selection) {
  for (SelectionRecorder* r = innermost_recorder; r; r = r->outer_) r->made_.push_back({std::string(kernel), selection});
}

Tier parse_tier(std::string_view name) {
  for (Tier t : {Tier::override_, Tier::overlay, Tier::memory, Tier::persistent, Tier::profile, Tier::autotune,
                 Tier::heuristic})
    if (to_string(t) == name) return t;
  throw InvalidArgument("unknown selection tier '" + std::string(name) +
                        "' (expected override, overlay, memory, persistent, profile, autotune or heuristic)");
}

std::string invocation_key(const DeviceInfo& dev, const Invocation& inv, std::string_view version) {
  return dev.fingerprint() + "\n" + inv.kernel + "\n" + std::string(version) + "\n" + inv.signature();
}

namespace {

// Constant-initialised, so a registration from another file's static initialiser finds it
// whatever the order the initialisers run in.
constinit std::atomic<select::AutotunerFactory> default_autotuner{nullptr};

struct AutotunerSlot {
  std::mutex mutex;
  std::shared_ptr<const Autotuner> tuner;
  std::atomic<bool> installed{false};
};

AutotunerSlot& autotuner_slot() {
  // Outlives static destructors that may still select. The tuning layer's registered tuner
  // answers until set_autotuner replaces it; it is made when it first runs.
  static auto* slot = [] {
    auto* s = new AutotunerSlot;
    s->tuner = std::make_shared<const Autotuner>(
        [](const Invocation& inv, const Implementation& impl,
           const std::shared_ptr<Device>& dev) -> std::optional<TuneOutcome> {
          static const Autotuner tuner = [] {
            const select::AutotunerFactory make = default_autotuner.load();
            return make ? make() : Autotuner{};
          }();
          if (!tuner) return std::nullopt;
          return tuner(inv, impl, dev);
        });
    s->installed.store(true);
    return s;
  }();
  return *slot;
}

std::shared_ptr<const Autotuner> installed_autotuner() {
  auto& slot = autotuner_slot();
  std::lock_guard lock(slot.mutex);
  return slot.tuner;
}

}  // namespace

namespace select {

DefaultAutotunerRegistration::DefaultAutotunerRegistration(AutotunerFactory make) { default_autotuner.store(make); }

}  // namespace select

void set_autotuner(Autotuner tuner) {
  auto& slot = autotuner_slot();
  std::lock_guard lock(slot.mutex);
  slot.tuner = tuner ? std::make_shared<const Autotuner>(std::move(tuner)) : nullptr;
  slot.installed.store(slot.tuner != nullptr, std::memory_order_release);
}

Autotuner current_autotuner() {
  auto t = installed_autotuner();
  return t ? *t : Autotuner{};
}

namespace {

std::size_t mix(std::size_t h, std::size_t v) { return h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2)); }

std::size_t fnv(std::string_view s) {
  std::size_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// nlohmann's own hash walks objects through items(), which builds a string per element: too
// slow for the hit path. Types enter the hash as they enter the signature (1 and 1.0 differ).
std::size_t hash_json(const nlohmann::json& j) {
  using T = nlohmann::json::value_t;
  std::size_t h = static_cast<std::size_t>(j.type());
  switch (j.type()) {
    case T::object:
      for (auto it = j.begin(); it != j.end(); ++it) h = mix(mix(h, fnv(it.key())), hash_json(it.value()));
      return h;
    case T::array:
      for (const auto& v : j) h = mix(h, hash_json(v));
      return h;
    case T::string: return mix(h, fnv(j.get_ref<const std::string&>()));
    case T::boolean: return mix(h, j.get<bool>() ? 1 : 2);
    case T::number_integer: return mix(h, static_cast<std::size_t>(j.get<std::int64_t>()));
    case T::number_unsigned: return mix(h, static_cast<std::size_t>(j.get<std::uint64_t>()));
    case T::number_float: return mix(h, std::hash<double>{}(j.get<double>()));
    default: return h;
  }
}

// Hash and equality over what enters an invocation's key: scalars do not.
struct SignatureHash {
  std::size_t operator()(const Invocation* inv) const {
    std::size_t h = fnv(inv->kernel);
    for (const auto& a : inv->args) {
      h = mix(h, static_cast<std::size_t>(a.dtype) * 31 + a.shape.size());
      for (auto d : a.shape) h = mix(h, static_cast<std::size_t>(d));
    }
    if (!inv->options.empty()) h = mix(h, hash_json(inv->options));
    return h;
  }
};

struct SignatureEqual {
  bool operator()(const Invocation* a, const Invocation* b) const {
    return a->kernel == b->kernel && a->args == b->args && a->options == b->options;
  }
};

struct Shard;

// Everything known about one invocation signature on this executor's device.
struct Site {
  Invocation inv;  // without scalars
  const Kernel* kernel = nullptr;
  const Implementation* impl = nullptr;
  std::string version;
  std::string key;
  Shard* shard = nullptr;

  // Guarded by shard->mutex.
  std::shared_ptr<const Selection> remembered;  // reported as tier memory
  Tier origin = Tier::heuristic;
  bool tune_failed = false;         // the autotuner ran for this key and found nothing
  std::vector<Config> admitted;     // override and overlay configs already found in the space

  std::mutex resolve;  // one chain walk per key at a time: a key is tuned once, not per thread

  std::mutex space_mutex;
  std::optional<ParamSpace> space;
};

struct alignas(64) Shard {
  std::shared_mutex mutex;
  std::unordered_map<const Invocation*, std::unique_ptr<Site>, SignatureHash, SignatureEqual> sites;
};

std::string one_line_key(const std::string& key) {
  std::string out = key;
  for (std::size_t p = 0; (p = out.find('\n', p)) != std::string::npos;) out.replace(p, 1, " | ");
  return out;
}

std::string utc_date(std::int64_t unix) {
  if (unix <= 0) return "at an unknown date";
  std::time_t t = static_cast<std::time_t>(unix);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

std::string duration(double ns) {
  char buf[32];
  if (ns >= 1e6) std::snprintf(buf, sizeof buf, "%.3g ms", ns / 1e6);
  else if (ns >= 1e3) std::snprintf(buf, sizeof buf, "%.3g us", ns / 1e3);
  else std::snprintf(buf, sizeof buf, "%.3g ns", ns);
  return buf;
}

std::string describe_measured(const CacheEntry& e) {
  std::string s = "measured " + utc_date(e.provenance.created_unix);
  if (!e.provenance.strategy.empty()) s += " by " + e.provenance.strategy;
  s += ", " + std::to_string(e.provenance.evaluations) + " evaluations, median " + duration(e.stats.median_ns);
  return s;
}

std::shared_ptr<PersistentCache> shared_cache(const fs::path& path) {
  static std::mutex mutex;
  static auto* open = new std::map<std::string, std::weak_ptr<PersistentCache>>;
  std::lock_guard lock(mutex);
  auto& slot = (*open)[fs::absolute(path).lexically_normal().string()];
  if (auto c = slot.lock()) return c;
  auto c = std::make_shared<PersistentCache>(path);
  slot = c;
  return c;
}

}  // namespace

struct Executor::State {
  Registry* registry = nullptr;
  std::shared_ptr<Device> device;
  std::array<Shard, 16> shards;

  fs::path cache_path;  // empty: tier off
  std::once_flag cache_once;
  std::shared_ptr<PersistentCache> cache;
  std::atomic<bool> cache_warned{false};

  std::vector<fs::path> profile_dirs;
  std::once_flag profiles_once;
  std::shared_ptr<const select::ProfileStore> profiles;

  std::shared_ptr<select::Recorder> recorder;
  std::shared_ptr<select::Trace> trace;

  const DeviceInfo& dev() const { return device->info(); }

  Site& site(const Invocation& inv) {
    const std::size_t h = SignatureHash{}(&inv);
    Shard& shard = shards[(h >> 7) % shards.size()];
    {
      std::shared_lock lock(shard.mutex);
      auto it = shard.sites.find(&inv);
      if (it != shard.sites.end()) return *it->second;
    }
    // First sight of this signature: validate it and compute everything a hit needs.
    const Kernel& kernel = registry->kernel(inv.kernel);
    kernel.validate(inv);
    const Implementation& impl = registry->implementation(inv, dev());
    auto s = std::make_unique<Site>();
    s->inv.kernel = inv.kernel;
    s->inv.args = inv.args;
    s->inv.options = inv.options;
    s->kernel = &kernel;
    s->impl = &impl;
    s->version = registry->version(impl);
    s->key = invocation_key(dev(), s->inv, s->version);
    s->shard = &shard;
    Site* raw = s.get();
    std::unique_lock lock(shard.mutex);
    auto [it, inserted] = shard.sites.emplace(&raw->inv, std::move(s));
    return *it->second;
  }

  std::string mismatch(Site& s, const Config& c) {
    std::lock_guard lock(s.space_mutex);
    if (!s.space) s.space = s.impl->space(s.inv, dev());
    return s.space->mismatch(c);
  }

  // Overrides and overlays are checked once per distinct config and site.
  void admit(Site& s, const Config& c, const char* what) {
    {
      std::shared_lock lock(s.shard->mutex);
      for (const auto& a : s.admitted)
        if (a == c) return;
    }
    std::string why = mismatch(s, c);
    if (!why.empty())
      throw InvalidArgument(std::string(what) + " config " + c.canonical() + " is not in the space of " + s.inv.kernel +
                            " for " + s.inv.signature() + " on " + dev().id() + ": " + why);
    std::unique_lock lock(s.shard->mutex);
    if (s.admitted.size() < 16) s.admitted.push_back(c);
  }

  PersistentCache* persistent() {
    if (cache_path.empty()) return nullptr;
    std::call_once(cache_once, [&] {
      try {
        cache = shared_cache(cache_path);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "ejk: persistent cache tier off: %s\n", e.what());
      }
    });
    return cache.get();
  }

  const select::ProfileStore* profile_store() {
    std::call_once(profiles_once, [&] {
      if (!profile_dirs.empty()) profiles = select::ProfileStore::shared(profile_dirs);
    });
    return profiles.get();
  }

  std::optional<WarmStart> warm_start(Site& s, const Invocation& inv) {
    if (PersistentCache* pc = persistent()) {
      try {
        const std::string fingerprint = dev().fingerprint();
        std::optional<CacheEntry> nearest;
        double nearest_d = INFINITY;
        Invocation nearest_inv;
        for (CacheEntry& e : pc->list(s.inv.kernel)) {
          if (e.fingerprint != fingerprint || e.version != s.version) continue;
          Invocation stored = select::invocation_of(e.kernel, e.signature);
          const double d = select::log_distance(stored, s.inv);
          if (d < nearest_d && mismatch(s, e.config).empty()) {
            nearest_d = d;
            nearest = std::move(e);
            nearest_inv = std::move(stored);
          }
        }
        if (nearest) {
          const std::string diff = select::differences(*s.kernel, nearest_inv, s.inv);
          return WarmStart{nearest->config, "persistent cache: " + (diff.empty() ? std::string("this workload's entry")
                                                                                 : "nearest workload on this device, " + diff)};
        }
      } catch (const std::exception& e) {
        if (!cache_warned.exchange(true)) std::fprintf(stderr, "ejk: persistent cache read failed: %s\n", e.what());
      }
    }
    if (const auto* store = profile_store())
      if (auto hit = store->find(inv, *s.kernel, s.version, dev(), [&](const Config& c) { return mismatch(s, c); }))
        return WarmStart{std::move(hit->config), std::move(hit->reason)};
    return std::nullopt;
  }

  bool may_tune(const Site& s, const Policy& p) const {
    return s.origin == Tier::heuristic && !s.tune_failed && p.autotune == AutotunePolicy::autotune &&
           p.strict >= Tier::autotune && autotuner_slot().installed.load(std::memory_order_acquire);
  }

  void finish(const Site& s, const Selection& sel, const Policy& p) const {
    if (sel.origin > p.strict)
      throw SelectionError("selection of " + s.inv.kernel + " " + s.inv.signature() + " on " + dev().id() +
                           " fell to tier '" + std::string(to_string(sel.origin)) + "', below EJK_STRICT=" +
                           std::string(to_string(p.strict)) + " (" + sel.reason + "; key " + one_line_key(s.key) + ")");
    if (p.log == SelectionLog::all || (p.log == SelectionLog::chain && sel.tier != Tier::memory))
      std::fprintf(stderr, "ejk: select %s %s on %s -> %s\n", s.inv.kernel.c_str(), s.inv.signature().c_str(),
                   dev().id().c_str(), sel.reason.c_str());
  }

  std::shared_ptr<const Selection> walk(Site& s, const Invocation& inv, const Policy& pol) {
    std::lock_guard walking(s.resolve);
    {
      // Another thread may have answered while this one waited.
      std::shared_lock lock(s.shard->mutex);
      if (s.remembered && !may_tune(s, pol)) {
        auto sel = s.remembered;
        lock.unlock();
        finish(s, *sel, pol);
        return sel;
      }
    }
    std::vector<std::string> notes;
    std::optional<Config> config;
    std::string reason;
    Tier tier = Tier::heuristic;
    bool tune_failed = false;

    if (PersistentCache* pc = persistent()) {
      try {
        if (auto e = pc->get(s.key)) {
          if (std::string why = mismatch(s, e->config); why.empty()) {
            config = e->config;
            reason = "persistent: " + describe_measured(*e);
            tier = Tier::persistent;
          } else {
            notes.push_back("persistent entry " + e->config.canonical() + " rejected: " + why);
          }
        }
      } catch (const IoError& err) {
        if (!cache_warned.exchange(true)) std::fprintf(stderr, "ejk: persistent cache read failed: %s\n", err.what());
        notes.push_back("persistent cache unreadable");
      }
    }

    if (!config)
      if (const auto* store = profile_store())
        if (auto hit = store->find(inv, *s.kernel, s.version, dev(), [&](const Config& c) { return mismatch(s, c); })) {
          config = std::move(hit->config);
          reason = std::move(hit->reason);
          tier = Tier::profile;
        }

    if (!config && pol.autotune == AutotunePolicy::autotune) {
      auto tuner = installed_autotuner();
      if (pol.strict < Tier::autotune) {
        notes.push_back("autotune not tried: EJK_STRICT=" + std::string(to_string(pol.strict)));
      } else if (!tuner) {
        notes.push_back("no autotuner installed");
      } else {
        tune(s, inv, *tuner, config, reason, notes);
        if (config) tier = Tier::autotune;
        else tune_failed = true;
      }
    }

    if (!config) {
      try {
        config = s.impl->heuristic(inv, dev());
      } catch (const std::exception& e) {
        throw SelectionError("no tier selected a config for " + s.inv.kernel + " " + s.inv.signature() + " on " +
                             dev().id() + ": the heuristic failed: " + e.what() + " (key " + one_line_key(s.key) + ")");
      }
      if (std::string why = mismatch(s, *config); !why.empty())
        throw SelectionError("no tier selected a config for " + s.inv.kernel + " " + s.inv.signature() + " on " +
                             dev().id() + ": the heuristic's " + config->canonical() + " is not in the space: " + why);
      reason = "heuristic: " + std::string(to_string(dev().backend)) + " rule";
      if (pol.autotune == AutotunePolicy::heuristics) notes.push_back("autotune policy is heuristics");
      tier = Tier::heuristic;
    }
    for (std::size_t i = 0; i < notes.size(); ++i) reason += (i ? "; " : " (") + notes[i];
    if (!notes.empty()) reason += ")";

    auto sel = std::make_shared<const Selection>(Selection{*config, tier, tier, reason});
    {
      std::unique_lock lock(s.shard->mutex);
      s.remembered = std::make_shared<const Selection>(Selection{*config, Tier::memory, tier, "memory: " + reason});
      s.origin = tier;
      s.tune_failed = tune_failed;
    }
    finish(s, *sel, pol);
    return sel;
  }

  void tune(Site& s, const Invocation& inv, const Autotuner& tuner, std::optional<Config>& config, std::string& reason,
            std::vector<std::string>& notes) {
    std::optional<TuneOutcome> out;
    try {
      out = tuner(inv, *s.impl, device);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ejk: autotuning %s %s failed: %s\n", s.inv.kernel.c_str(), s.inv.signature().c_str(),
                   e.what());
      notes.push_back(std::string("autotune failed: ") + e.what());
      return;
    }
    if (!out) {
      notes.push_back("autotune found no valid candidate");
      return;
    }
    if (std::string why = mismatch(s, out->entry.config); !why.empty()) {
      notes.push_back("autotune result " + out->entry.config.canonical() + " rejected: " + why);
      return;
    }
    CacheEntry& e = out->entry;
    e.fingerprint = dev().fingerprint();
    e.kernel = s.inv.kernel;
    e.version = s.version;
    e.signature = s.inv.signature();
    if (e.provenance.tool_version.empty()) e.provenance.tool_version = std::string(tool_version());
    if (e.provenance.created_unix == 0)
      e.provenance.created_unix =
          std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    if (e.provenance.evaluations == 0) e.provenance.evaluations = static_cast<int>(out->measurements.size());
    config = e.config;
    reason = "autotune: tuned now";
    if (!e.provenance.strategy.empty()) reason += " by " + e.provenance.strategy;
    reason += ", " + std::to_string(e.provenance.evaluations) + " evaluations, median " + duration(e.stats.median_ns);
    if (PersistentCache* pc = persistent()) {
      try {
        pc->put(e, out->measurements, DeviceRecord::of(dev()));
      } catch (const std::exception& err) {
        std::fprintf(stderr, "ejk: could not store the tuned config for %s: %s\n", s.inv.kernel.c_str(), err.what());
        notes.push_back(std::string("not stored: ") + err.what());
      }
    } else {
      notes.push_back("not stored: persistent cache off");
    }
  }

  std::shared_ptr<const Selection> resolve(Site& s, const Invocation& inv, const std::optional<Config>& override_config) {
    const Policy pol = effective_policy(base);
    if (override_config) {
      admit(s, *override_config, "override");
      auto sel = std::make_shared<const Selection>(
          Selection{*override_config, Tier::override_, Tier::override_, "override: config given by the caller"});
      finish(s, *sel, pol);
      return sel;
    }
    for (const ScopedOverlay* o = ScopedOverlay::innermost(); o; o = o->outer())
      if (const Config* c = o->find(s.inv.kernel, s.key)) {
        admit(s, *c, "overlay");
        auto sel = std::make_shared<const Selection>(
            Selection{*c, Tier::overlay, Tier::overlay,
                      o->kernel_wide() ? "overlay: scoped config for every " + s.inv.kernel
                                       : std::string("overlay: scoped config for this invocation")});
        finish(s, *sel, pol);
        return sel;
      }
    std::shared_ptr<const Selection> hit;
    {
      std::shared_lock lock(s.shard->mutex);
      if (s.remembered && !may_tune(s, pol)) hit = s.remembered;
    }
    if (hit) {
      finish(s, *hit, pol);
      return hit;
    }
    return walk(s, inv, pol);
  }

  void record(const Site& s, const Invocation& inv, const Selection& sel) {
    nlohmann::json j = inv.to_json();
    j["version"] = s.version;
    j["signature"] = s.inv.signature();
    j["device"] = dev().id();
    j["fingerprint"] = dev().fingerprint();
    j["tier"] = to_string(sel.tier);
    j["origin"] = to_string(sel.origin);
    recorder->append(j.dump() + "\n");
  }

  Policy base;
};

Executor::Executor(std::shared_ptr<Device> device, ExecutorOptions options)
    : device_(std::move(device)), policy_(Policy::from_env()), state_(std::make_unique<State>()) {
  if (!device_) throw InvalidArgument("Executor: device is null");
  state_->device = device_;
  state_->base = policy_;
  state_->registry = options.registry ? options.registry : &Registry::global();
  if (options.cache_path) {
    state_->cache_path = *options.cache_path;
  } else {
    try {
      state_->cache_path = default_cache_path();
    } catch (const IoError& e) {
      std::fprintf(stderr, "ejk: persistent cache tier off: %s\n", e.what());
    }
  }
  state_->profile_dirs = options.profile_dirs ? *options.profile_dirs : default_profile_dirs();
  if (const char* rec = std::getenv("EJK_RECORD"); rec && *rec) state_->recorder = select::Recorder::open(rec);
  if (const char* trace = std::getenv("EJK_TRACE"); trace && *trace) state_->trace = select::Trace::open(trace);
}

Executor::~Executor() = default;

Selection Executor::select(const Invocation& inv, const std::optional<Config>& override_config) {
  Site& s = state_->site(inv);
  return *state_->resolve(s, inv, override_config);
}

std::shared_ptr<const Selection> Executor::run(const Invocation& inv, std::span<const Tensor> args,
                                               const std::optional<Config>& override_config) {
  if (args.size() != inv.args.size())
    throw InvalidArgument(inv.kernel + " takes " + std::to_string(inv.args.size()) + " arguments, got " +
                          std::to_string(args.size()));
  for (std::size_t i = 0; i < args.size(); ++i) {
    const Tensor& t = args[i];
    if (!t.defined()) throw InvalidArgument(inv.kernel + ": argument " + std::to_string(i) + " is an empty tensor");
    if (&t.device() != device_.get())
      throw InvalidArgument(inv.kernel + ": argument " + std::to_string(i) + " lives on " + t.device().info().id() +
                            ", the executor runs on " + device_->info().id());
    // Implementations address memory from the invocation's specs: the tensors must hold that much.
    if (t.dtype() != inv.args[i].dtype || t.numel() != numel(inv.args[i].shape))
      throw InvalidArgument(inv.kernel + ": argument " + std::to_string(i) + " is " + to_string(t.shape()) + " " +
                            std::string(to_string(t.dtype())) + " but the invocation describes " +
                            to_string(inv.args[i].shape) + " " + std::string(to_string(inv.args[i].dtype)));
  }
  Site& s = state_->site(inv);
  auto sel = state_->resolve(s, inv, override_config);
  if (state_->recorder) state_->record(s, inv, *sel);
  if (state_->trace) {
    const auto start = std::chrono::steady_clock::now();
    const double device_ns = device_->time_ns([&] { s.impl->run(inv, sel->config, args, *device_); });
    state_->trace->call(inv, device_->info(), *s.impl, *sel, start, device_ns);
  } else {
    s.impl->run(inv, sel->config, args, *device_);
  }
  SelectionRecorder::record(inv.kernel, sel);
  return sel;
}

std::string Executor::key(const Invocation& inv) { return state_->site(inv).key; }

void Executor::clear_memory() {
  for (auto& shard : state_->shards) {
    std::unique_lock lock(shard.mutex);
    for (auto& [_, s] : shard.sites) {
      s->remembered.reset();
      s->origin = Tier::heuristic;
      s->tune_failed = false;
    }
  }
}

std::optional<WarmStart> Executor::warm_start(const Invocation& inv) {
  Site& s = state_->site(inv);
  return state_->warm_start(s, inv);
}

PersistentCache* Executor::persistent_cache() { return state_->persistent(); }

}  // namespace ejk
