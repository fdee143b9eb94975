#pragma once
// What the selector chain answers: a config, the tier that produced it and why.
#include <cstdint>
#include <string>
#include <string_view>

#include "ejk/config.hpp"

namespace ejk {

// Selector tiers in the order they are asked; the first that answers wins. A lower tier
// comes later in the chain: "falling below persistent" means profile, autotune or heuristic.
enum class Tier : std::uint8_t { override_, overlay, memory, persistent, profile, autotune, heuristic };

std::string_view to_string(Tier t);
Tier parse_tier(std::string_view name);  // throws InvalidArgument listing the tiers

struct Selection {
  Config config;
  Tier tier = Tier::heuristic;
  // The tier that first produced the config: equals `tier` except on memory-cache hits, where
  // it says whether the remembered answer was measured, shipped or a heuristic.
  Tier origin = Tier::heuristic;
  std::string reason;  // e.g. "profile: nearest workload, m 4096 for 3000 (cpu-avx512.json)"
};

}  // namespace ejk
