#include "ejk/executor.hpp"

#include "ejk/error.hpp"
#include "ejk/registry.hpp"

namespace ejk {

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

Executor::Executor(std::shared_ptr<Device> device) : device_(std::move(device)) {}
Executor::~Executor() = default;

namespace {
void check_admitted(const ParamSpace& space, const Config& c, const Invocation& inv) {
  std::string why = space.mismatch(c);
  if (!why.empty()) throw InvalidArgument("config " + c.canonical() + " is not in the space of " + inv.kernel + ": " + why);
}
}  // namespace

Selection Executor::select(const Invocation& inv, const std::optional<Config>& override_config) {
  Registry& reg = Registry::global();
  reg.kernel(inv.kernel).validate(inv);
  const DeviceInfo& dev = device_->info();
  const Implementation& impl = reg.implementation(inv, dev);
  if (override_config) {
    check_admitted(impl.space(inv, dev), *override_config, inv);
    return {*override_config, Tier::override_, "override: config given by the caller"};
  }
  return {impl.heuristic(inv, dev), Tier::heuristic, "heuristic: " + std::string(to_string(dev.backend)) + " rule"};
}

Selection Executor::run(const Invocation& inv, std::span<const Tensor> args,
                        const std::optional<Config>& override_config) {
  if (args.size() != inv.args.size())
    throw InvalidArgument(inv.kernel + " takes " + std::to_string(inv.args.size()) + " arguments, got " +
                          std::to_string(args.size()));
  for (const auto& t : args)
    if (&t.device() != device_.get())
      throw InvalidArgument(inv.kernel + ": a tensor lives on " + t.device().info().id() + ", the executor runs on " +
                            device_->info().id());
  Selection s = select(inv, override_config);
  Registry::global().implementation(inv, device_->info()).run(inv, s.config, args, *device_);
  return s;
}

}  // namespace ejk
