// The tuner as the executor's autotune tier.
#include "ejk/executor.hpp"
#include "ejk/tuner.hpp"

namespace ejk {

void install_autotuner(TuneOptions options) {
  set_autotuner([options](const Invocation& inv, const Implementation& impl,
                          const std::shared_ptr<Device>& device) -> std::optional<TuneOutcome> {
    TuneResult r = tune(inv, impl, *device, options);
    if (!r.tuned) return std::nullopt;
    return TuneOutcome{r.entry, r.measurements};
  });
}

}  // namespace ejk
