#pragma once
// How selection behaves: whether the autotune tier may run, how far down the chain a
// selection may fall, and whether selections are logged. Read from the environment when an
// executor is created; ScopedPolicy overrides it for the whole process while alive.
#include <cstdint>
#include <optional>
#include <string_view>

#include "ejk/export.hpp"
#include "ejk/selection.hpp"

namespace ejk {

enum class AutotunePolicy : std::uint8_t { heuristics, autotune };

EJK_API std::string_view to_string(AutotunePolicy p);
EJK_API AutotunePolicy parse_autotune_policy(std::string_view name);  // throws InvalidArgument

// off; chain: every selection not answered by the memory cache; all: every call.
enum class SelectionLog : std::uint8_t { off, chain, all };

struct EJK_API Policy {
  AutotunePolicy autotune = AutotunePolicy::heuristics;
  // Selection fails with SelectionError when the answer comes from a tier below this one.
  // Tier::heuristic (the last tier) means not strict.
  Tier strict = Tier::heuristic;
  SelectionLog log = SelectionLog::off;

  // EJK_AUTOTUNE_POLICY=autotune|heuristics (default heuristics), EJK_STRICT=<tier>,
  // EJK_LOG_SELECTION=0|1|all. Throws InvalidArgument naming the variable and its value.
  static Policy from_env();
  bool operator==(const Policy&) const = default;
};

// Fields left empty keep their value from the policy underneath.
struct PolicyOverride {
  std::optional<AutotunePolicy> autotune = std::nullopt;
  std::optional<Tier> strict = std::nullopt;
  std::optional<SelectionLog> log = std::nullopt;
};

// Overrides the policy of every executor in the process, from every thread, while alive.
// Overrides stack: the newest live one wins field by field, and ending them in any order
// (from any thread) leaves the remaining ones in force.
class EJK_API ScopedPolicy {
 public:
  explicit ScopedPolicy(const PolicyOverride& o);
  ~ScopedPolicy();
  ScopedPolicy(const ScopedPolicy&) = delete;
  ScopedPolicy& operator=(const ScopedPolicy&) = delete;

 private:
  std::uint64_t id_;
};

// `base` with every live ScopedPolicy applied. Lock-free: safe on the hot path.
EJK_API Policy effective_policy(const Policy& base);

}  // namespace ejk
