#pragma once
// Runs invocations with a config chosen by the selector chain.
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "ejk/config.hpp"
#include "ejk/invocation.hpp"
#include "ejk/kernel.hpp"
#include "ejk/tensor.hpp"

namespace ejk {

// Selector tiers in the order they are asked; the first that answers wins.
enum class Tier : std::uint8_t { override_, overlay, memory, persistent, profile, autotune, heuristic };

std::string_view to_string(Tier t);
Tier parse_tier(std::string_view name);  // throws InvalidArgument

struct Selection {
  Config config;
  Tier tier = Tier::heuristic;
  std::string reason;  // why this tier answered, e.g. "profile: nearest workload, m 4096 for 3000"
};

// Invocation key: device fingerprint + kernel name + kernel version + canonical signature.
std::string invocation_key(const DeviceInfo& dev, const Invocation& inv, std::string_view version);

class Executor {
 public:
  explicit Executor(std::shared_ptr<Device> device);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  Device& device() const { return *device_; }
  const std::shared_ptr<Device>& device_ptr() const { return device_; }

  // Validates and selects without running.
  Selection select(const Invocation& inv, const std::optional<Config>& override_config = {});
  // Validates, selects and launches. Returns the selection used.
  Selection run(const Invocation& inv, std::span<const Tensor> args,
                const std::optional<Config>& override_config = {});

 private:
  std::shared_ptr<Device> device_;
};

}  // namespace ejk
