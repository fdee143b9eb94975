#pragma once
// What the selector chain answers: a config, the tier that produced it and why.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ejk/config.hpp"
#include "ejk/export.hpp"

namespace ejk {

// Selector tiers in the order they are asked; the first that answers wins. A lower tier
// comes later in the chain: "falling below persistent" means profile, autotune or heuristic.
enum class Tier : std::uint8_t { override_, overlay, memory, persistent, profile, autotune, heuristic };

EJK_API std::string_view to_string(Tier t);
EJK_API Tier parse_tier(std::string_view name);  // throws InvalidArgument listing the tiers

struct Selection {
  Config config;
  Tier tier = Tier::heuristic;
  // The tier that first produced the config: equals `tier` except on memory-cache hits, where
  // it says whether the remembered answer was measured, shipped or a heuristic.
  Tier origin = Tier::heuristic;
  std::string reason;  // e.g. "profile: nearest workload, m 4096 for 3000 (cpu-avx512.json)"
};

// One launch an executor made: the kernel and the selection it ran with.
struct SelectionMade {
  std::string kernel;
  std::shared_ptr<const Selection> selection;
};

// Collects the selections of every launch any executor makes on this thread while it lives:
// how a call such as flash_attention() or matmul(), which returns only tensors, tells which
// config ran and why (a backward call makes several). Recorders nest, each seeing every launch;
// a scoped object, destroyed on the thread that made it, innermost first. Without one, a
// launch costs a thread-local read.
//
//   ejk::SelectionRecorder ran;
//   auto r = ejk::flash_attention(ctx, q, k, v);
//   std::puts(ran.made().back().selection->config.canonical().c_str());
class EJK_API SelectionRecorder {
 public:
  SelectionRecorder();
  ~SelectionRecorder();
  SelectionRecorder(const SelectionRecorder&) = delete;
  SelectionRecorder& operator=(const SelectionRecorder&) = delete;

  const std::vector<SelectionMade>& made() const { return made_; }
  // Hands a launch to this thread's recorders (Executor::run calls it).
  static void record(std::string_view kernel, const std::shared_ptr<const Selection>& selection);

 private:
  std::vector<SelectionMade> made_;
  SelectionRecorder* outer_;
};

}  // namespace ejk
