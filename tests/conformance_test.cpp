// Every kernel x implementation x device on the kernel's smallest workload
// (Kernel::smallest_sizes): the heuristic's config and the first and last config of its space,
// each against the double reference. Driven by the registry, so a new kernel or backend is
// covered without new test code. Cheap enough to run where every work-item is checked:
// scripts/test runs the OpenCL instances under Oclgrind (data races, uninitialised values,
// out-of-bounds accesses, API misuse) and on PoCL built for another CPU (tests/CMakeLists.txt),
// the others in the suite itself. The coverage test keeps every OpenCL source in reach.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <tuple>

#include "core/embedded.hpp"
#include "support.hpp"

namespace ejk {
namespace {

struct SmallCase {
  std::string kernel;
  std::map<std::string, std::int64_t> sizes;
  nlohmann::json options = nlohmann::json::object();
};

// The built-in kernels, read when GoogleTest expands the parameterised suites, before any test
// registers kernels of its own. Not at static initialisation: the tests link the library's
// objects, whose registrations may run after this file's initialisers.
const std::vector<std::string>& builtin_kernels() {
  static const std::vector<std::string> names = Registry::global().kernels();
  return names;
}

// Every built-in kernel's smallest workload, by name.
std::vector<SmallCase> small_cases() {
  std::vector<SmallCase> cases;
  for (const auto& name : builtin_kernels()) {
    const Kernel& k = Registry::global().kernel(name);
    cases.push_back({name, k.smallest_sizes(), k.smallest_options()});
  }
  return cases;
}


// Runs `inv` on `ctx` under `config` with the inputs `in`; returns the out and inout arguments
// as read back, in order.
HostArrays run_outputs(const Context& ctx, const Invocation& inv, const Implementation& impl, const Config& config,
                       const HostArrays& in) {
  std::vector<Tensor> args;
  for (std::size_t i = 0; i < inv.args.size(); ++i) args.push_back(ctx.from(inv.args[i].shape, inv.args[i].dtype, in[i]));
  impl.run(inv, config, args, ctx.device());
  const auto defs = Registry::global().kernel(inv.kernel).args();
  HostArrays out;
  for (std::size_t i = 0; i < args.size(); ++i)
    if (defs[i].role != Role::in) out.push_back(args[i].read());
  return out;
}

class Conformance : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(Conformance, MatchesTheReference) {
  const auto& [name, id] = GetParam();
  Context ctx(id);
  // Under a checker the device must be the checker's (its runner script sets this).
  if (const char* want = std::getenv("EJK_TEST_OPENCL_DEVICE"); want && ctx.device().info().backend == Backend::opencl) {
    ASSERT_NE(ctx.device().info().name.find(want), std::string::npos) << ctx.device().info().name;
  }
  const Kernel& kernel = Registry::global().kernel(name);
  ASSERT_FALSE(kernel.smallest_sizes().empty()) << name << " states no smallest workload (Kernel::smallest_sizes)";
  const Invocation inv = kernel.from_sizes(kernel.smallest_sizes(), DType::f32, kernel.smallest_options());
  const DeviceInfo& dev = ctx.device().info();
  const HostArrays in = kernel.inputs(inv, 11);
  const HostArrays want = kernel.reference(inv, in);
  int ran = 0;
  for (const Implementation* impl : Registry::global().implementations(name)) {
    if (impl->backend() != dev.backend || !impl->supports(inv, dev)) continue;
    ++ran;
    std::vector<Config> configs{impl->heuristic(inv, dev)};
    const auto space = impl->space(inv, dev).enumerate();
    if (!space.empty())
      for (const Config& c : {space.front(), space.back()})
        if (std::find(configs.begin(), configs.end(), c) == configs.end()) configs.push_back(c);
    for (const Config& config : configs) {
      const HostArrays got = run_outputs(ctx, inv, *impl, config, in);
      ASSERT_EQ(got.size(), want.size());
      for (std::size_t i = 0; i < got.size(); ++i)
        EXPECT_LE(test::relative_error(got[i], want[i]), kernel.tolerance(inv)) << config.canonical() << " output " << i;
    }
  }
  // Every kernel has an implementation on every backend compiled in.
  EXPECT_GT(ran, 0) << name << " has no " << to_string(dev.backend) << " implementation for its smallest workload";
}

// Every kernel with a sampled reference: at the elements it samples it is the full reference,
// and it reads only inside the input arguments. The table's cases, f32, plus the decode
// kernels' options (sliding window, sinks, soft cap) and larger contexts over several pages.
TEST(SampledReference, IsTheFullReferenceAtItsElements) {
  std::vector<SmallCase> cases = small_cases();
  cases.push_back({"ragged_page_attention",
                   {{"num_seqs", 3}, {"q_len", 3}, {"context", 37}, {"heads", 4}, {"kv_heads", 2}, {"head_dim", 16}, {"block_size", 8}},
                   {{"sliding_window", 9}, {"logits_soft_cap", 3.0}, {"sinks", true}}});
  cases.push_back({"ragged_decode_attention",
                   {{"batch", 5}, {"heads", 4}, {"kv_heads", 2}, {"head_dim", 16}, {"seq", 40}},
                   {{"sliding_window", 7}, {"sinks", true}}});
  // More rows than the sample, with the fills' -inf rows among them; padded and packed lse layouts.
  cases.push_back({"attention_merge", {{"batch", 2}, {"seq", 37}, {"heads", 3}, {"head_dim", 16}}});
  cases.push_back({"attention_merge", {{"batch", 2}, {"seq", 37}, {"heads", 3}, {"head_dim", 16}}, {{"packed", true}}});
  // More sequences than the sample; packed ones of random lengths, some empty.
  for (const char* k : {"mean_pooling", "mean_pooling_bwd"})
    for (bool packed : {false, true})
      cases.push_back({k, {{"batch", 11}, {"seq", 13}, {"dim", 24}}, {{"packed", packed}}});
  cases.push_back({"page_attention",
                   {{"batch", 3}, {"heads", 8}, {"kv_heads", 2}, {"head_dim", 32}, {"context", 70}, {"block_size", 16}},
                   {{"logits_soft_cap", 5.0}}});
  // More rows and columns than the sample, over groups of random sizes (some empty).
  for (bool trans : {false, true})
    cases.push_back({"grouped_matmul", {{"m", 40}, {"k", 11}, {"n", 21}, {"groups", 6}}, {{"trans_rhs", trans}}});
  cases.push_back({"grouped_matmul_tgmm", {{"m", 40}, {"k", 11}, {"n", 21}, {"groups", 6}}});
  // More (sequence, head) pairs than the sample, contexts over several pages.
  cases.push_back({"mla_decode",
                   {{"batch", 5}, {"heads", 3}, {"context", 37}, {"qk_nope_head_dim", 16}, {"rope_dim", 8}, {"v_head_dim", 12},
                    {"kv_lora_rank", 24}, {"block_size", 8}}});
  // More pairs and rows than the sample; layouts from patterns and from a mask, GQA, a soft
  // cap, segments, more keys than queries.
  for (const char* k : {"block_sparse_attention", "block_sparse_attention_bwd"}) {
    cases.push_back({k,
                     {{"batch", 2}, {"seq", 37}, {"heads", 4}, {"kv_heads", 2}, {"head_dim", 8}},
                     {{"block_q", 8}, {"block_k", 8}, {"causal", true}, {"local_blocks", 1}, {"stride", 2},
                      {"logits_soft_cap", 5.0}, {"segments", true}}});
    cases.push_back({k,
                     {{"batch", 3}, {"seq_q", 21}, {"seq_k", 37}, {"heads", 2}, {"head_dim", 8}},
                     {{"block_q", 8}, {"block_k", 16}, {"mask", true}}});
  }
  // More pairs and tokens than the sample: packed sequences, GQA, head_dim_v unlike head_dim.
  for (const char* k : {"native_sparse_attention", "native_sparse_attention_bwd"})
    cases.push_back({k,
                     {{"batch", 2}, {"seq", 23}, {"heads", 4}, {"kv_heads", 2}, {"head_dim", 8}, {"head_dim_v", 12}, {"selected", 3}},
                     {{"block_size", 4}, {"sequences", 2}}});
  // More (sequence, head) pairs and tokens than the sample: every gate, states in and out,
  // reversed, packed sequences of uneven lengths.
  for (const char* k : {"recurrent", "gla", "recurrent_bwd", "gla_bwd"}) {
    const bool bwd = std::string(k).ends_with("_bwd");
    cases.push_back({k,
                     {{"batch", 2}, {"seq", 19}, {"heads", 3}, {"head_dim", 8}, {"v_head_dim", 6}},
                     {{"gates", {"g", "g_gamma", "gk", "gv"}}, {"initial_state", true}, {bwd ? "dht" : "final_state", true},
                      {"reverse", true}}});
    cases.push_back({k,
                     {{"seq", 41}, {"heads", 3}, {"head_dim", 8}, {"num_seqs", 5}},
                     {{"gates", {"gk"}}, {"initial_state", true}, {bwd ? "dht" : "final_state", true}}});
  }
  cases.push_back({"lightning_attention", {{"seq", 41}, {"heads", 5}, {"head_dim", 8}, {"num_seqs", 5}},
                   {{"initial_state", true}, {"final_state", true}}});
  cases.push_back({"lightning_attention_bwd", {{"batch", 2}, {"seq", 19}, {"heads", 5}, {"head_dim", 8}},
                   {{"initial_state", true}, {"dht", true}, {"reverse", true}}});
  int with_sample = 0;
  for (const auto& c : cases) {
    const Kernel& kernel = Registry::global().kernel(c.kernel);
    const Invocation inv = kernel.from_sizes(c.sizes, DType::f32, c.options);
    const HostArrays in = kernel.inputs(inv, 5);
    const auto defs = kernel.args();
    const ArgReader read = test::host_reader(in, defs, c.kernel);
    const std::vector<SampledOutput> got = kernel.sampled_reference(inv, read);
    if (got.empty()) continue;
    ++with_sample;
    const HostArrays want = kernel.reference(inv, in);
    for (const SampledOutput& s : got) {
      ASSERT_LT(s.arg, defs.size()) << c.kernel;
      ASSERT_NE(defs[s.arg].role, Role::in) << c.kernel;
      std::size_t o = 0;  // position of s.arg among the outputs
      for (std::size_t i = 0; i < s.arg; ++i) o += defs[i].role != Role::in;
      test::expect_sample_matches(s, want[o], c.kernel + " " + defs[s.arg].name);
    }
  }
  // matmul, flash_attention forward and backward, attention_merge, mean pooling forward and
  // backward, the three decode kernels, grouped matmul, mla_decode, block sparse and native
  // sparse attention and the linear attention family forward and backward, with the cases above.
  EXPECT_GE(with_sample, 51);
}

// Every kernel's inputs, made on the device, are exactly what Kernel::inputs gives on the
// host, except the arguments derive() computes, which agree within the kernel's tolerance.
class Inputs : public ::testing::TestWithParam<std::string> {};

TEST_P(Inputs, MadeOnTheDeviceAsOnTheHost) {
  Context ctx(GetParam());
  for (const auto& c : small_cases()) {
    const Kernel& kernel = Registry::global().kernel(c.kernel);
    const Invocation inv = kernel.from_sizes(c.sizes, DType::f16, c.options);
    const HostArrays want = kernel.inputs(inv, 5);
    const auto fills = kernel.fills(inv, 5);
    const auto defs = kernel.args();
    std::vector<Tensor> args;
    for (const auto& spec : inv.args) args.emplace_back(ctx.device_ptr(), spec.shape, spec.dtype);
    kernel.make_inputs(inv, 5, args);
    ctx.device().synchronize();
    for (std::size_t i = 0; i < args.size(); ++i) {
      if (defs[i].role == Role::out) continue;
      const std::vector<double> got = args[i].read();
      if (fills[i].kind == Fill::Kind::none)
        EXPECT_LE(test::relative_error(got, want[i]), kernel.tolerance(inv)) << c.kernel << " " << defs[i].name;
      else
        EXPECT_EQ(got, want[i]) << c.kernel << " " << defs[i].name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, Inputs, ::testing::ValuesIn(test::devices()),
                         [](const auto& param) { return test::test_name(param.param); });

INSTANTIATE_TEST_SUITE_P(All, Conformance,
                         ::testing::Combine(::testing::ValuesIn(builtin_kernels()),
                                            ::testing::ValuesIn(test::devices())),
                         [](const auto& param) {
                           return std::get<0>(param.param) + "_" + test::test_name(std::get<1>(param.param));
                         });

// Every kernel states its smallest workload, and the OpenCL implementations' sources (with what
// they include) are every OpenCL source embedded: a new kernel or .cl file cannot escape the
// checks above.
TEST(ConformanceCoverage, EveryKernelAndOpenClSource) {
  std::set<std::string> covered;
  for (const auto& c : small_cases()) {
    EXPECT_FALSE(c.sizes.empty()) << c.kernel << " states no smallest workload (Kernel::smallest_sizes)";
    // Every OpenCL implementation of the kernel: a tensor-core one ranks above the portable one.
    for (const Implementation* impl : Registry::global().implementations(c.kernel))
      if (impl->backend() == Backend::opencl)
        for (const auto& key : impl->sources()) covered.insert(key);
  }
  std::set<std::string> all;
  for (const detail::EmbeddedFile* f : detail::embedded_files()) {
    const std::string key = f->key;
    if (key.size() > 3 && key.ends_with(".cl")) all.insert(key);
  }
  // Sources spliced into a covered one by #include "file" (same folder) are covered too.
  for (const auto& key : std::set<std::string>(covered)) {
    const std::string folder = key.substr(0, key.find('/') + 1);
    for (const auto& other : all)
      if (other.starts_with(folder) &&
          detail::embedded(key).text().find("#include \"" + other.substr(folder.size()) + "\"") != std::string_view::npos)
        covered.insert(other);
  }
  // The device's own fill and difference, which tests/oclgrind/run.sh checks through their tests.
  covered.insert("common/fill.cl");
  covered.insert("common/difference.cl");
  for (const auto& key : all) EXPECT_TRUE(covered.count(key)) << key << " is run by no kernel";
}

}  // namespace
}  // namespace ejk
