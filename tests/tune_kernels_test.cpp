// The tuner on the built-in kernels: every candidate checked against the kernel's reference,
// the backward pass of attention included (checked numerically, not only timed).
#include <algorithm>
#include <cmath>

#include "tune_support.hpp"

namespace ejk {
namespace {

TuneOptions quick() {
  TuneOptions o = test::quick_tune();
  o.seed = 5;
  o.strategy = Strategy::random;
  o.budget.evaluations = 3;
  return o;
}

TEST(TuneKernels, AttentionForwardAndBackwardAreCheckedAgainstTheirReferences) {
  auto dev = open_device("cpu");
  for (const char* name : {"flash_attention", "flash_attention_bwd"}) {
    const Kernel& k = Registry::global().kernel(name);
    Invocation inv = k.from_sizes({{"seq", 40}, {"heads", 2}, {"head_dim", 16}}, DType::f32, {{"causal", true}});
    TuneResult r = tune(inv, *dev, quick());
    EXPECT_EQ(r.validated, "reference") << name;
    ASSERT_FALSE(r.measurements.empty()) << name;
    for (const auto& m : r.measurements) {
      EXPECT_EQ(m.status, Status::ok) << name << " " << m.config.canonical() << ": " << m.message;
      EXPECT_GT(m.error, 0) << name << ": outputs were compared";  // f32 against double is never exact
      EXPECT_LE(m.error, k.tolerance(inv)) << name;
    }
    EXPECT_TRUE(r.tuned) << r.report;
  }
}

// Causal with more queries than keys leaves the first rows with no allowed key (the diagonal
// sits bottom-right): their lse is -inf in the reference too, a right answer, not an overflow.
TEST(TuneKernels, MinusInfinityWhereTheReferenceHasItPasses) {
  auto dev = open_device("cpu");
  const Kernel& k = Registry::global().kernel("flash_attention");
  Invocation inv = k.from_sizes({{"seq_q", 40}, {"seq_k", 20}, {"heads", 2}, {"head_dim", 16}}, DType::f32,
                                {{"causal", true}});
  const HostArrays in = k.inputs(inv, 3);
  const HostArrays want = k.reference(inv, in);
  ASSERT_TRUE(std::any_of(want[1].begin(), want[1].end(), [](double x) { return std::isinf(x); }))
      << "the input should mask some rows entirely";
  TuneResult r = tune(inv, *dev, quick());
  ASSERT_FALSE(r.measurements.empty());
  for (const auto& m : r.measurements) EXPECT_EQ(m.status, Status::ok) << m.config.canonical() << ": " << m.message;
  EXPECT_TRUE(r.tuned) << r.report;
}

}  // namespace
}  // namespace ejk
