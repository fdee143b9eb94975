// Recipes: YAML text -> parse_recipe (validation, sweep expansion, from_sizes) -> what `ejk run`
// and `ejk tune` do with each workload before touching a device (its name and key, its cost,
// and its parameter space on the CPU with the recipe's own constraints, checked against the
// heuristic's config; listing whole spaces would cost seconds an input).
#include <algorithm>

#include "ejk/ejk.hpp"
#include "recipe.hpp"
#include "report.hpp"
#include "support.hpp"

namespace {

const ejk::DeviceInfo& cpu() {
  static const ejk::DeviceInfo info = [] {
    for (const auto& d : ejk::list_devices())
      if (d.backend == ejk::Backend::cpu) return d;
    ejk::fuzz::finding("no cpu device");
  }();
  return info;
}

void exercise(const ejk::app::Recipe& recipe, const ejk::app::Workload& w) {
  const ejk::Invocation& inv = w.invocation;
  (void)ejk::app::workload_name(inv, w.sizes);
  (void)inv.signature();
  const ejk::Kernel& kernel = ejk::Registry::global().kernel(inv.kernel);
  kernel.validate(inv);  // from_sizes accepted it: a later refusal would have no place
  ejk::fuzz::require_sane_sizes(inv);
  (void)kernel.flops(inv);
  (void)kernel.bytes(inv);
  (void)kernel.vars(inv);
  try {
    const ejk::Implementation& impl = ejk::Registry::global().implementation(inv, cpu());
    ejk::ParamSpace space = impl.space(inv, cpu());
    for (const auto& c : recipe.tune.constraints) space.constraint(c);
    (void)space.describe();
    // Every constraint, the recipe's too, evaluated once.
    (void)space.mismatch(impl.heuristic(inv, cpu()));
  } catch (const ejk::Error&) {
    // No CPU implementation or config for this workload, or a recipe constraint over a name
    // the space lacks: run and tune report it for the workload and go on.
  }
}

constexpr std::size_t max_exercised = 64;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)ejk::Registry::global();
  (void)cpu();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(ejk::fuzz::text_of(data, size));
  ejk::app::Recipe recipe;
  try {
    recipe = ejk::app::parse_recipe(text, "fuzz.yaml");
  } catch (const ejk::InvalidArgument& e) {
    ejk::fuzz::require_place(e.what(), "fuzz.yaml:");
    return 0;
  }
  if (recipe.workloads.empty()) ejk::fuzz::finding("a recipe accepted with no workloads", text);
  // The checks after parsing are the same code for every point of a sweep: a few points show
  // them, and a large sweep costs only its parsing.
  for (std::size_t i = 0; i < recipe.workloads.size() && i < max_exercised; ++i) exercise(recipe, recipe.workloads[i]);
  return 0;
}
