// Recipe parsing: sweeps expand, and every malformed recipe gives file:line:col and the allowed values.
#include <filesystem>

#include "recipe.hpp"
#include "support.hpp"

namespace ejk {
namespace {

std::string error_of(const std::string& yaml) {
  try {
    app::parse_recipe(yaml, "r.yaml");
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(Recipe, SweepsExpandAsACartesianProduct) {
  auto r = app::parse_recipe(R"(
name: sweep
device: cpu
defaults: {dtype: f16}
workloads:
  - kernel: matmul
    shape: {m: [1, 16, 2048], n: 4096, k: [512, 4096]}
    options: {trans_b: true}
tune: {strategy: exhaustive, budget: {evals: 10, seconds: 5}, seed: 7, constraints: ["mc >= 96"]}
)",
                             "r.yaml");
  EXPECT_EQ(r.name, "sweep");
  EXPECT_EQ(r.device, "cpu");
  ASSERT_EQ(r.workloads.size(), 6u);
  EXPECT_EQ(r.workloads[0].sizes.at("m"), 1);
  EXPECT_EQ(r.workloads[1].sizes.at("k"), 4096);
  EXPECT_EQ(r.workloads[5].sizes.at("m"), 2048);
  EXPECT_EQ(r.workloads[0].dtype, DType::f16);
  EXPECT_EQ(r.workloads[0].invocation.args[1].shape, (Shape{4096, 512}));  // b transposed: [n, k]
  EXPECT_EQ(r.workloads[0].where, "r.yaml:6:5");
  EXPECT_EQ(r.tune.strategy, "exhaustive");
  EXPECT_EQ(r.tune.evals, 10);
  EXPECT_EQ(r.tune.seed, 7u);
  EXPECT_EQ(r.tune.constraints.at(0), "mc >= 96");
}

TEST(Recipe, MalformedRecipesAreLocated) {
  EXPECT_EQ(error_of("name: x\nworkloads:\n  - kernel: matmul\n    shape: {m: two, n: 1, k: 1}\n"),
            "r.yaml:4:16: size 'm' must be an integer, got 'two'");
  EXPECT_EQ(error_of("name: x\nworkloads:\n  - kernel: nope\n    shape: {m: 1}\n").rfind("r.yaml:3:13: unknown kernel 'nope' (allowed: ", 0), 0u);
  EXPECT_EQ(error_of("name: x\nwork: []\n"),
            "r.yaml:2:1: unknown key 'work' in the recipe (allowed: defaults, device, name, tune, workloads)");
  EXPECT_EQ(error_of("name: x\nworkloads:\n  - kernel: matmul\n    shape: {m: 1, n: 1, q: 1}\n"),
            "r.yaml:4:25: kernel 'matmul' has no size 'q' (allowed: m, n, k, batch)");
  EXPECT_EQ(error_of("name: x\nworkloads:\n  - kernel: matmul\n    shape: {m: 1, n: 1}\n"),
            "r.yaml:3:5: matmul needs size 'k' (sizes: m, n, k, batch)");
  EXPECT_EQ(error_of("name: x\ndefaults: {dtype: f64}\nworkloads: []\n"),
            "r.yaml:2:19: unknown dtype 'f64' (allowed: f32, f16, bf16)");
  EXPECT_EQ(error_of("name: x\nworkloads: [\n"), "r.yaml:3:1: YAML syntax error: end of sequence flow not found");
  EXPECT_EQ(error_of("name: x\nworkloads: []\ntune: {strategy: greedy}\n"),
            "r.yaml:3:18: unknown strategy 'greedy' (allowed: anneal, exhaustive, model, random)");
  EXPECT_EQ(error_of("name: x\nworkloads: 3\n"), "r.yaml:2:12: workloads must be a non-empty list");
}

TEST(Recipe, ShippedRecipesLoad) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(EJK_RECIPES_DIR)) {
    if (entry.path().extension() != ".yaml") continue;
    ++count;
    SCOPED_TRACE(entry.path().string());
    app::Recipe r;
    EXPECT_NO_THROW(r = app::load_recipe(entry.path().string()));
    EXPECT_FALSE(r.workloads.empty());
  }
  EXPECT_GE(count, 3);
}

}  // namespace
}  // namespace ejk
