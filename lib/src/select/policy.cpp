#include "ejk/policy.hpp"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "ejk/error.hpp"

namespace ejk {

std::string_view to_string(AutotunePolicy p) { return p == AutotunePolicy::autotune ? "autotune" : "heuristics"; }

AutotunePolicy parse_autotune_policy(std::string_view name) {
  if (name == "autotune") return AutotunePolicy::autotune;
  if (name == "heuristics") return AutotunePolicy::heuristics;
  throw InvalidArgument("unknown autotune policy '" + std::string(name) + "' (expected autotune or heuristics)");
}

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

// Live overrides combined into one word, so readers need a single atomic load:
// bits 0-1 autotune (present, value), 2-5 strict (present, 3-bit tier), 6-8 log (present, 2-bit value).
struct Packed {
  static std::uint32_t pack(const PolicyOverride& o) {
    std::uint32_t w = 0;
    if (o.autotune) w |= 1u | (static_cast<std::uint32_t>(*o.autotune) << 1);
    if (o.strict) w |= (1u << 2) | (static_cast<std::uint32_t>(*o.strict) << 3);
    if (o.log) w |= (1u << 6) | (static_cast<std::uint32_t>(*o.log) << 7);
    return w;
  }
  // `top` over `below`, field by field.
  static std::uint32_t over(std::uint32_t below, std::uint32_t top) {
    std::uint32_t w = below;
    if (top & 1u) w = (w & ~0x3u) | (top & 0x3u);
    if (top & (1u << 2)) w = (w & ~0x3cu) | (top & 0x3cu);
    if (top & (1u << 6)) w = (w & ~0x1c0u) | (top & 0x1c0u);
    return w;
  }
  static Policy apply(Policy p, std::uint32_t w) {
    if (w & 1u) p.autotune = static_cast<AutotunePolicy>((w >> 1) & 1u);
    if (w & (1u << 2)) p.strict = static_cast<Tier>((w >> 3) & 7u);
    if (w & (1u << 6)) p.log = static_cast<SelectionLog>((w >> 7) & 3u);
    return p;
  }
};

struct Overrides {
  std::mutex mutex;
  std::uint64_t next_id = 1;
  std::vector<std::pair<std::uint64_t, std::uint32_t>> live;  // in creation order
  std::atomic<std::uint32_t> combined{0};

  void recombine() {
    std::uint32_t w = 0;
    for (const auto& [_, packed] : live) w = Packed::over(w, packed);
    combined.store(w, std::memory_order_release);
  }
};

Overrides& overrides() {
  static Overrides* o = new Overrides;  // outlives static destructors that may still select
  return *o;
}

}  // namespace

Policy Policy::from_env() {
  Policy p;
  if (const char* v = env("EJK_AUTOTUNE_POLICY")) {
    try {
      p.autotune = parse_autotune_policy(v);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(std::string("EJK_AUTOTUNE_POLICY: ") + e.what());
    }
  }
  if (const char* v = env("EJK_STRICT")) {
    try {
      p.strict = parse_tier(v);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(std::string("EJK_STRICT: ") + e.what());
    }
  }
  if (const char* v = env("EJK_LOG_SELECTION")) {
    std::string s(v);
    if (s == "0" || s == "off") p.log = SelectionLog::off;
    else if (s == "1" || s == "on") p.log = SelectionLog::chain;
    else if (s == "all") p.log = SelectionLog::all;
    else throw InvalidArgument("EJK_LOG_SELECTION: unknown value '" + s + "' (expected 0, 1 or all)");
  }
  return p;
}

ScopedPolicy::ScopedPolicy(const PolicyOverride& o) {
  auto& ov = overrides();
  std::lock_guard lock(ov.mutex);
  id_ = ov.next_id++;
  ov.live.emplace_back(id_, Packed::pack(o));
  ov.recombine();
}

ScopedPolicy::~ScopedPolicy() {
  auto& ov = overrides();
  std::lock_guard lock(ov.mutex);
  std::erase_if(ov.live, [&](const auto& e) { return e.first == id_; });
  ov.recombine();
}

Policy effective_policy(const Policy& base) {
  std::uint32_t w = overrides().combined.load(std::memory_order_acquire);
  return w ? Packed::apply(base, w) : base;
}

}  // namespace ejk
