#pragma once
// What the tuner tests share: timing short enough for CI on PoCL and lavapipe (every candidate
// is still really run, checked and timed) and small f32 matmul workloads.
#include <cstdint>

#include <gtest/gtest.h>

#include "ejk/registry.hpp"
#include "ejk/tuner.hpp"
#include "matmul/matmul.hpp"
#include "support.hpp"

namespace ejk::test {

// Exhaustive with a random seed unless the test sets strategy, budget and seed.
inline TuneOptions quick_tune() {
  TuneOptions o;
  o.timing.warmup_seconds = 0.001;
  o.timing.min_samples = 3;
  o.timing.max_samples = 5;
  o.timing.max_seconds = 0.01;
  o.timing.flush_bytes = 1 << 20;
  o.timing.rerank_rounds = 3;
  return o;
}

// c[m, n] = a[m, k] * b[k, n] + beta * c, in f32.
inline Invocation matmul_f32(std::int64_t m, std::int64_t n, std::int64_t k, double beta = 0.0) {
  return kernels::matmul::invocation({{m, k}, DType::f32}, {{k, n}, DType::f32}, {{m, n}, DType::f32}, false, false,
                                     1.0, beta);
}

// A short random tune of `inv` in which every candidate ran and matched the kernel's reference
// within its tolerance: the tuner checks what it times.
inline void expect_tune_checks_every_candidate(const Invocation& inv, Device& dev) {
  SCOPED_TRACE(inv.kernel + " " + inv.signature());
  const Kernel& k = Registry::global().kernel(inv.kernel);
  TuneOptions o = quick_tune();
  o.seed = 3;
  o.strategy = Strategy::random;
  o.budget.evaluations = 3;
  const TuneResult r = tune(inv, dev, o);
  EXPECT_EQ(r.validated, "reference");
  ASSERT_FALSE(r.measurements.empty());
  for (const auto& m : r.measurements) {
    EXPECT_EQ(m.status, Status::ok) << m.config.canonical() << ": " << m.message;
    EXPECT_LE(m.error, k.tolerance(inv));
  }
  EXPECT_TRUE(r.tuned) << r.report;
}

}  // namespace ejk::test
