#pragma once
// Runs invocations with a config chosen by the selector chain:
// override -> overlay -> memory cache -> persistent cache -> profile -> autotune -> heuristic
// -> error. docs/selection.md describes each tier, the environment and the cache layout.
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ejk/config.hpp"
#include "ejk/export.hpp"
#include "ejk/invocation.hpp"
#include "ejk/kernel.hpp"
#include "ejk/measurement.hpp"
#include "ejk/policy.hpp"
#include "ejk/selection.hpp"
#include "ejk/tensor.hpp"

namespace ejk {

class Registry;
class PersistentCache;

// Invocation key: device fingerprint + kernel name + kernel version + canonical signature.
EJK_API std::string invocation_key(const DeviceInfo& dev, const Invocation& inv, std::string_view version);

// What an autotuner returns: the best config with its statistics and provenance, and every
// candidate it measured (failures included). The executor fills the entry's key fields.
struct TuneOutcome {
  CacheEntry entry;
  std::vector<Measurement> measurements;
};

// A config a tune measures right after the heuristic's, and where it came from.
struct WarmStart {
  Config config;
  std::string source;  // "persistent cache: nearest workload on this device, m 4096 for 3000"
};

// Tunes one invocation on a device; nullopt when no candidate ran and validated.
using Autotuner = std::function<std::optional<TuneOutcome>(const Invocation&, const Implementation&,
                                                          const std::shared_ptr<Device>&)>;

// The autotuner the autotune tier calls (thread-safe); an empty function removes it.
EJK_API void set_autotuner(Autotuner tuner);
EJK_API Autotuner current_autotuner();

struct ExecutorOptions {
  Registry* registry = nullptr;  // default: Registry::global()
  // The persistent cache file; default default_cache_path(). An empty path turns the tier off.
  std::optional<std::filesystem::path> cache_path;
  // Folders of profile bundles; default default_profile_dirs().
  std::optional<std::vector<std::filesystem::path>> profile_dirs;
};

class EJK_API Executor {
 public:
  // Reads EJK_AUTOTUNE_POLICY, EJK_STRICT, EJK_LOG_SELECTION, EJK_RECORD and EJK_TRACE now.
  explicit Executor(std::shared_ptr<Device> device, ExecutorOptions options = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  Device& device() const { return *device_; }
  const std::shared_ptr<Device>& device_ptr() const { return device_; }
  // The environment's policy, before ScopedPolicy overrides.
  const Policy& base_policy() const { return policy_; }

  // Validates and selects without running. Throws InvalidArgument (bad invocation, override
  // or overlay outside the space), SelectionError (strict mode, nothing selectable).
  Selection select(const Invocation& inv, const std::optional<Config>& override_config = {});
  // Validates, selects and launches. The returned selection is shared, not copied: the
  // cache-hit path allocates nothing.
  std::shared_ptr<const Selection> run(const Invocation& inv, std::span<const Tensor> args,
                                       const std::optional<Config>& override_config = {});

  // This invocation's key on this executor's device (for overlays and cache tools).
  std::string key(const Invocation& inv);
  // Forgets every remembered selection, so the next call walks the chain again.
  void clear_memory();
  // Where a tune of `inv` should start besides the heuristic: the config of the nearest
  // workload of the same kernel and version in this device's persistent cache (the workload's
  // own entry when it is there), else the profile tier's answer; only a config inside inv's
  // space. nullopt when there is none.
  std::optional<WarmStart> warm_start(const Invocation& inv);
  // The persistent cache this executor reads and writes, or nullptr when it is off or
  // could not be opened (the reason was reported on stderr).
  PersistentCache* persistent_cache();

  struct State;

 private:
  std::shared_ptr<Device> device_;
  Policy policy_;
  std::unique_ptr<State> state_;
};

}  // namespace ejk
