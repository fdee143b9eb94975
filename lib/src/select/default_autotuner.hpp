#pragma once
// The autotuner behind the executor's autotune tier until set_autotuner replaces it. Tuning is
// the layer above selection (it measures through the registry and records into the caches), so
// selection does not name it: the tuning layer registers its tuner here from its own file
// (tune/autotuner.cpp), as backends register into core.
#include "ejk/executor.hpp"

namespace ejk::select {

// Makes the default autotuner. Called once, at the first autotune, so that the tuner reads its
// options from the environment then rather than when the library is loaded.
using AutotunerFactory = Autotuner (*)();

class DefaultAutotunerRegistration {
 public:
  explicit DefaultAutotunerRegistration(AutotunerFactory make);
};

}  // namespace ejk::select
