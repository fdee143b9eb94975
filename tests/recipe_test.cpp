// Recipe parsing: sweeps expand, and every malformed recipe gives file:line:col and the allowed values.
#include <filesystem>
#include <fstream>

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
            "r.yaml:4:16: size 'm' must be an integer from 0 to 2147483647, got 'two'");
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

// m = n = k = 2^32 wrapped the element count to 0 and the CPU GEMM read out of bounds.
TEST(Recipe, SizesAreBoundedAndLocated) {
  EXPECT_EQ(error_of("name: x\nworkloads:\n  - kernel: matmul\n    shape: {m: 4294967296, n: 4294967296, k: 4294967296}\n"),
            "r.yaml:4:16: size 'm' must be an integer from 0 to 2147483647, got 4294967296");
  EXPECT_EQ(error_of("name: x\nworkloads:\n  - kernel: matmul\n    shape: {m: -1, n: 1, k: 1}\n"),
            "r.yaml:4:16: size 'm' must be an integer from 0 to 2147483647, got -1");
  // Each size within the bound, the tensor beyond it: the argument and its shape are named.
  EXPECT_EQ(error_of("name: x\nworkloads:\n  - kernel: matmul\n    shape: {m: 2147483647, n: 2147483647, k: 1}\n"),
            "r.yaml:3:5: matmul: argument c f32 [2147483647, 2147483647]: more than 2^40 elements (the limit of one tensor)");
  // An option of the wrong type is the kernel's located error, not an internal one.
  EXPECT_EQ(error_of("name: x\nworkloads:\n  - kernel: matmul\n    shape: {m: 1, n: 1, k: 1}\n    options: {trans_b: maybe}\n"),
            "r.yaml:3:5: matmul option 'trans_b' must be a boolean, got \"maybe\"");
}

TEST(Recipe, NumbersAreRangeCheckedExactly) {
  const std::string head = "name: x\nworkloads:\n  - kernel: matmul\n    shape: {m: 1, n: 1, k: 1}\n";
  EXPECT_EQ(error_of(head + "tune: {budget: {evals: 4294967297}}\n"),
            "r.yaml:5:24: tune.budget.evals must be an integer from 1 to 2147483647, got 4294967297");
  EXPECT_EQ(error_of(head + "tune: {budget: {seconds: -1}}\n"),
            "r.yaml:5:26: tune.budget.seconds must be a number from 0 to 1000000000, got -1");
  EXPECT_EQ(error_of(head + "tune: {budget: {seconds: .nan}}\n"),
            "r.yaml:5:26: tune.budget.seconds must be a number from 0 to 1000000000, got '.nan'");
  EXPECT_EQ(error_of(head + "tune: {seed: -3}\n"), "r.yaml:5:14: tune.seed must be an integer from 0 to 9223372036854775807, got -3");
  EXPECT_EQ(error_of(head + "    options: {trans_a: .inf}\n"), "r.yaml:5:24: an option must be a finite number, got '.inf'");
  EXPECT_EQ(error_of(head + "tune: {budget: {race: 0.5}}\n"), "r.yaml:5:23: tune.budget.race must be 0 (no race) or at least 1");
  EXPECT_EQ(error_of(head + "tune: {budget: {race: -1}}\n"),
            "r.yaml:5:23: tune.budget.race must be a number from 0 to 1000000000, got -1");
  auto r = app::parse_recipe(head + "tune: {budget: {evals: 2147483647, seconds: 0.5}, seed: 9223372036854775807}\n", "r.yaml");
  EXPECT_EQ(r.tune.evals, 2147483647);
  EXPECT_EQ(r.tune.seconds, 0.5);
  EXPECT_EQ(r.tune.race, 4.0);
  EXPECT_EQ(app::parse_recipe(head + "tune: {budget: {race: 0}}\n", "r.yaml").tune.race, 0.0);
  EXPECT_EQ(r.tune.seed, 9223372036854775807u);
}

TEST(Recipe, YamlStructureIsRefusedWithItsPlace) {
  const std::string wl = "workloads:\n  - kernel: matmul\n    shape: {m: 1, n: 1, k: 1}\n";
  // Non-scalar keys were an internal error.
  EXPECT_EQ(error_of("name: x\n" + wl + "? [a, b]\n: 1\n"), "r.yaml:5:3: a key must be text, not a list");
  EXPECT_EQ(error_of("name: x\nworkloads:\n  - kernel: matmul\n    shape: {{m: 1}: 2}\n"),
            "r.yaml:4:13: a key must be text, not a mapping");
  // Duplicate keys: the first won at the top level and the last inside shape.
  EXPECT_EQ(error_of("name: x\n" + wl + "name: y\n"), "r.yaml:5:1: duplicate key 'name' (first at r.yaml:1:1)");
  EXPECT_EQ(error_of("name: x\nworkloads:\n  - kernel: matmul\n    shape: {m: 1, n: 1, k: 1, m: 2}\n"),
            "r.yaml:4:31: duplicate key 'm' (first at r.yaml:4:13)");
  // Only the first document was read.
  EXPECT_EQ(error_of("name: x\n" + wl + "---\nname: y\n"), "r.yaml:5:1: a recipe is one YAML document, and a second one starts here");
  // yaml-cpp's LoadAll yields empty documents forever from this one, without reading on.
  EXPECT_EQ(error_of(",nam&w: \"anchored\"\nworkloads\"anchored\"# A fir  st "),
            "r.yaml:1:1: YAML syntax error: this is not a YAML document");
  EXPECT_EQ(error_of(""), "r.yaml:1:1: the recipe is empty (it needs name and workloads)");
  EXPECT_EQ(error_of("# nothing\n"), "r.yaml:1:1: the recipe is empty (it needs name and workloads)");
  // Text: valid UTF-8, in the file and after escapes, and no control characters.
  EXPECT_EQ(error_of("name: x\n" + wl + "    options: {trans_b: \"\xff\xfe\"}\n"), "r.yaml:5:25: the recipe is not valid UTF-8 here");
  EXPECT_EQ(error_of("name: x\n" + wl + "    options: {trans_b: \"\\ud800\"}\n"), "r.yaml:5:31: YAML syntax error: invalid unicode: 55296");
  EXPECT_EQ(error_of("name: \"a\\eb\"\n" + wl), "r.yaml:1:7: text holds a control character");
  EXPECT_EQ(error_of("name: a\x01\n" + wl), "r.yaml:1:8: the recipe holds a control character (0x01)");
  // Depth: yaml-cpp's own limit, then ours, each located.
  EXPECT_EQ(error_of("name: x\n" + wl + "    options: {a: " + std::string(3000, '[') + std::string(3000, ']') + "}\n")
                .rfind("r.yaml:5:", 0),
            0u);
  EXPECT_EQ(error_of("name: x\n" + wl + "    options: {a: " + std::string(40, '[') + std::string(40, ']') + "}\n"),
            "r.yaml:5:47: nested more than 32 levels deep");
  // A self-referencing alias is a cycle yaml-cpp builds: the depth bound ends it.
  EXPECT_NE(error_of("name: x\n" + wl + "    options: {a: &x [1, *x]}\n").find("nested more than 32 levels deep"),
            std::string::npos);
  // The file size is checked before YAML reads it.
  EXPECT_EQ(error_of("name: x\n" + wl + "# " + std::string(1 << 20, 'a') + "\n"),
            "r.yaml:1:1: the recipe is 1048647 bytes, more than the limit of 1048576 (1 MiB)");
}

// A 2 KB alias bomb ran for ~50 s and took 4 GiB; an aliased sweep list expanded to 10^9
// workloads. Both are refused at once, at their place.
TEST(Recipe, ExpansionIsBounded) {
  std::string bomb = "name: x\nbomb:\n  a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n";
  for (char c = 'b'; c <= 'j'; ++c)
    bomb += std::string("  ") + c + ": &" + c + " [*" + static_cast<char>(c - 1) + ", *" + static_cast<char>(c - 1) +
            ", *" + static_cast<char>(c - 1) + ", *" + static_cast<char>(c - 1) + ", *" + static_cast<char>(c - 1) +
            ", *" + static_cast<char>(c - 1) + ", *" + static_cast<char>(c - 1) + ", *" + static_cast<char>(c - 1) +
            ", *" + static_cast<char>(c - 1) + ", *" + static_cast<char>(c - 1) + "]\n";
  bomb += "workloads:\n  - kernel: matmul\n    shape: {m: 1, n: 1, k: 1}\n    options: {trans_a: *j}\n";
  EXPECT_NE(error_of(bomb).find("more than 100000 YAML nodes (an alias counts at every use)"), std::string::npos) << error_of(bomb);

  std::string list = "[";
  for (int i = 1; i <= 1000; ++i) list += std::to_string(i) + (i < 1000 ? ", " : "]");
  const std::string sweep = "name: x\nworkloads:\n  - kernel: matmul\n    shape: {m: &s " + list + ", n: *s, k: *s}\n";
  EXPECT_EQ(error_of(sweep), "r.yaml:3:5: the recipe's sweeps expand to more than 10000 workloads");

  std::string opts = "[";
  for (int i = 0; i < 300; ++i) opts += std::string(i ? ", " : "") + "1";
  EXPECT_EQ(error_of("name: x\nworkloads:\n  - kernel: matmul\n    shape: {m: 1, n: 1, k: 1}\n    options: {x: " + opts + "]}\n"),
            "r.yaml:5:14: a workload's options (defaults included) hold more than 256 values");
}

// tf32 is a key option when set; `tf32: false` is the key of leaving it out. f16 operands refuse it.
TEST(Recipe, MatmulTf32Option) {
  auto r = app::parse_recipe(R"(
name: tf32
workloads:
  - kernel: matmul
    shape: {m: 64, n: 32, k: 16}
    options: {tf32: true, trans_b: true}
  - kernel: matmul
    shape: {m: 64, n: 32, k: 16}
    options: {tf32: false}
  - kernel: matmul
    shape: {m: 64, n: 32, k: 16}
)",
                             "r.yaml");
  ASSERT_EQ(r.workloads.size(), 3u);
  EXPECT_EQ(r.workloads[0].invocation.options.at("tf32"), true);
  EXPECT_EQ(r.workloads[0].invocation.args[1].shape, (Shape{32, 16}));
  EXPECT_NE(r.workloads[0].invocation.signature(), r.workloads[2].invocation.signature());
  EXPECT_EQ(r.workloads[1].invocation.signature(), r.workloads[2].invocation.signature());
  EXPECT_EQ(error_of("name: x\ndefaults: {dtype: f16}\nworkloads:\n  - kernel: matmul\n    shape: {m: 1, n: 1, k: 1}\n    options: {tf32: true}\n"),
            "r.yaml:4:5: matmul option 'tf32' takes f32 operands, not f16 (a [1, 1] f16)");
  EXPECT_EQ(error_of("name: x\nworkloads:\n  - kernel: matmul\n    shape: {m: 1, n: 1, k: 1}\n    options: {tf32: 1}\n"),
            "r.yaml:3:5: matmul option 'tf32' must be a boolean, got 1");
}

TEST(Recipe, DefaultOptionsApplyToEveryWorkload) {
  auto r = app::parse_recipe(R"(
name: defaults
defaults: {dtype: f16, options: {causal: true}}
workloads:
  - kernel: flash_attention
    shape: {seq: 64, heads: 2, head_dim: 32}
  - kernel: flash_attention
    shape: {seq: 64, heads: 2, head_dim: 32}
    options: {causal: false}
)",
                             "r.yaml");
  ASSERT_EQ(r.workloads.size(), 2u);
  EXPECT_EQ(r.workloads[0].invocation.options.at("causal"), true);
  EXPECT_EQ(r.workloads[1].invocation.options.at("causal"), false);  // a workload's own option wins
  // A default option a workload's kernel does not take is that kernel's located error.
  EXPECT_EQ(error_of("name: x\ndefaults: {options: {causal: true}}\nworkloads:\n  - kernel: matmul\n    shape: {m: 1, n: 1, k: 1}\n"),
            "r.yaml:4:5: matmul has no option 'causal' (options: trans_a, trans_b, tf32)");
  EXPECT_EQ(error_of("name: x\ndefaults: {options: [causal]}\nworkloads: []\n"),
            "r.yaml:2:21: defaults.options must be a mapping, not a list");
}

TEST(Recipe, DevicesAndConstraintsAreCheckedWhereTheyAre) {
  const std::string wl = "workloads:\n  - kernel: matmul\n    shape: {m: 1, n: 1, k: 1}\n";
  EXPECT_EQ(error_of("name: x\ndevice: gpu\n" + wl), "r.yaml:2:9: unknown device 'gpu' (allowed: auto, cpu, opencl:N, vulkan:N, cuda:N)");
  EXPECT_EQ(app::parse_recipe("name: x\ndevice: vulkan:3\n" + wl, "r.yaml").device_where, "r.yaml:2:9");
  const std::string deep = std::string(10000, '(') + "mc" + std::string(10000, ')') + " > 1";
  const std::string e = error_of("name: x\n" + wl + "tune: {constraints: [\"" + deep + "\"]}\n");
  EXPECT_EQ(e.rfind("r.yaml:5:22: constraint '", 0), 0u) << e.substr(0, 200);
  EXPECT_NE(e.find("nested more than 100 levels deep"), std::string::npos);
  auto r = app::parse_recipe("name: x\n" + wl + "tune:\n  constraints:\n    - mc >= 96\n", "r.yaml");
  EXPECT_EQ(r.tune.constraint_where.at(0), "r.yaml:7:7");
}

TEST(Recipe, FilesAreReadWithinTheLimit) {
  test::TempDir dir;
  const auto missing = (dir.path / "missing.yaml").string();
  try {
    app::load_recipe(missing);
    FAIL();
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot read recipe " + missing + ": No such file or directory");
  }
  EXPECT_THROW(app::load_recipe(dir.path.string()), IoError);
  const auto big = dir.path / "big.yaml";
  std::ofstream(big) << "name: x\n# " << std::string(10 << 20, 'a') << "\n";
  try {
    app::load_recipe(big.string());
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()), big.string() + ":1:1: the recipe is larger than the limit of 1048576 bytes (1 MiB)");
  }
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
