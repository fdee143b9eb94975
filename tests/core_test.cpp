// dtype conversions, expressions, parameter spaces, configs and invocations.
#include <cmath>
#include <limits>
#include <set>
#include <thread>

#include "backends/program_store.hpp"
#include "core/sha256.hpp"
#include "support.hpp"

namespace ejk {
namespace {

TEST(DType, HalfRoundTripsAndRounds) {
  for (float x : {0.f, 1.f, -2.5f, 65504.f, 6.1e-5f, 5.96e-8f, 0.1f, -1000.f}) {
    float back = f16_to_f32(f32_to_f16(x));
    EXPECT_NEAR(back, x, std::abs(x) * 1e-3 + 6e-8) << x;
  }
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(65520.f), 0x7c00);  // rounds to infinity
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
  EXPECT_EQ(f32_to_f16(1.0f + 1.0f / 4096), 0x3c00);  // ties to even
}

TEST(DType, BFloatRoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(3.140625f)), 3.140625f);
  EXPECT_NEAR(bf16_to_f32(f32_to_bf16(0.1f)), 0.1f, 1e-3);
  EXPECT_THROW(parse_dtype("f64"), InvalidArgument);
  EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
}

TEST(Expr, ParsesEvaluatesAndPrints) {
  Vars v{{"a", std::int64_t{6}}, {"b", std::int64_t{4}}, {"algo", std::string("native")}};
  EXPECT_EQ(Expr::parse("a * b + 2").eval(v), 26);
  EXPECT_EQ(Expr::parse("a % b == 2 && !(a < b)").eval(v), 1);
  EXPECT_EQ(Expr::parse("min(a, b) * max(a, 10) - -1").eval(v), 41);
  EXPECT_EQ(Expr::parse("algo == \"native\" || a > 100").eval(v), 1);
  EXPECT_EQ(Expr::parse("a >= 6 && b != 4").eval(v), 0);
  EXPECT_EQ(Expr::parse("tile * 4 <= local_mem").names(), (std::vector<std::string>{"local_mem", "tile"}));
  EXPECT_EQ(Expr::parse("a*b <= 24").text(), "a*b <= 24");
  EXPECT_THROW(Expr::parse("a * (b + 1"), InvalidArgument);
  EXPECT_THROW(Expr::parse("a $ b"), InvalidArgument);
  EXPECT_THROW(Expr::parse("c + 1").eval(v), InvalidArgument);
  EXPECT_THROW(Expr::parse("a / (b - 4)").eval(v), InvalidArgument);
  EXPECT_THROW(Expr::parse("algo + 1").eval(v), InvalidArgument);
}

TEST(ParamSpace, EnumeratesFiltersAndExplains) {
  ParamSpace s;
  s.param("algo", std::vector<Value>{std::string("native"), std::string("blas")})
      .param("tile", {8, 16, 32}, "algo == \"native\"")
      .param("wpt", {1, 2, 4}, "algo == \"native\"")
      .constraint("tile * wpt <= limit")
      .bind({{"limit", std::int64_t{32}}});
  auto all = s.enumerate();
  // native: (8,1)(8,2)(8,4)(16,1)(16,2)(32,1) = 6; blas: 1
  EXPECT_EQ(all.size(), 7u);
  EXPECT_EQ(s.cardinality(), 18u);
  for (const auto& c : all) EXPECT_EQ(s.mismatch(c), "") << c.canonical();
  EXPECT_NE(s.mismatch(Config{{"algo", std::string("native")}, {"tile", 32}, {"wpt", 2}}).find("tile * wpt"), std::string::npos);
  EXPECT_NE(s.mismatch(Config{{"algo", std::string("blas")}, {"tile", 8}}).find("does not apply"), std::string::npos);
  EXPECT_NE(s.mismatch(Config{{"algo", std::string("native")}, {"tile", 8}}).find("wpt"), std::string::npos);
  EXPECT_NE(s.mismatch(Config{{"algo", std::string("native")}, {"tile", 12}, {"wpt", 1}}).find("candidate"), std::string::npos);
  EXPECT_NE(s.describe().find("where tile * wpt <= limit"), std::string::npos);
}

TEST(Expr, UnknownNamesLeaveOnlyWhatTheKnownOnesDecide) {
  const Vars v{{"a", std::int64_t{6}}, {"b", std::int64_t{0}}, {"algo", std::string("blas")}};
  const std::set<std::string, std::less<>> unknown{"tile"};
  auto known = [&](const char* text) { return Expr::parse(text).eval_known(v, unknown); };
  EXPECT_EQ(known("algo == \"native\" && tile > 8"), 0);
  EXPECT_EQ(known("tile > 8 && algo == \"native\""), 0);
  EXPECT_EQ(known("tile > 8 || a == 6"), 1);
  EXPECT_EQ(known("a == 6 || tile / b > 1"), 1) << "a decided side leaves the other unread";
  EXPECT_EQ(known("tile > 8"), std::nullopt);
  EXPECT_EQ(known("algo == \"blas\" && tile > 8"), std::nullopt);
  EXPECT_EQ(known("!(tile > 8) || a < 0"), std::nullopt);
  EXPECT_EQ(known("min(tile, 4) < a"), std::nullopt);
  EXPECT_EQ(known("a * 2 == 12"), 1);
  EXPECT_THROW(known("a / b > 1 && tile > 8"), InvalidArgument);
}

// A constraint holds for a config that lacks one of its parameters unless the values the config
// has make it false: a recipe's `variant == "x" && p > 1` refuses every other variant.
TEST(ParamSpace, ConstraintsOverOtherVariantsParametersAreDecidedByTheRest) {
  ParamSpace s;
  s.param("algo", std::vector<Value>{std::string("native"), std::string("blas")})
      .param("tile", {8, 16, 32}, "algo == \"native\"")
      .param("depth", {1, 2}, "algo == \"blas\"")
      .constraint("tile <= 16")
      .constraint("algo == \"native\" && tile >= 16 || algo == \"blas\" && depth == 2");
  std::vector<std::string> got;
  for (const auto& c : s.enumerate()) got.push_back(c.canonical());
  EXPECT_EQ(got, (std::vector<std::string>{R"({"algo":"native","tile":16})", R"({"algo":"blas","depth":2})"}));
}

TEST(Config, CanonicalJsonIsSortedAndRoundTrips) {
  Config c{{"wpt", 4}, {"algo", std::string("x")}, {"tile", 16}};
  EXPECT_EQ(c.canonical(), R"({"algo":"x","tile":16,"wpt":4})");
  EXPECT_EQ(Config::from_json(nlohmann::json::parse(c.canonical())), c);
  EXPECT_THROW(Config::from_json(nlohmann::json::parse(R"({"a": 1.5})")), InvalidArgument);
  EXPECT_THROW(c.get("missing"), InvalidArgument);
}

TEST(Invocation, SignatureIsCanonicalAndExcludesScalars) {
  Invocation a;
  a.kernel = "matmul";
  a.args = {{{2, 3}, DType::f16}};
  a.options = {{"z", 1}, {"a", true}};
  a.scalars = {{"alpha", 2.0}};
  Invocation b = Invocation::from_json(nlohmann::json::parse(a.to_json().dump()));
  b.scalars = {{"alpha", 3.0}};
  EXPECT_EQ(a.signature(), b.signature());
  EXPECT_EQ(a.signature(), R"({"args":[{"dtype":"f16","shape":[2,3]}],"options":{"a":true,"z":1}})");
}

// Sizes whose product overflows 64 bits (2^32 * 2^32 = 2^64) wrapped the element count to 0 and
// let a kernel read far past its buffers: every shape is bounded where it enters.
TEST(Shape, BoundsAreCheckedWithoutOverflow) {
  EXPECT_EQ(numel({2, 3, 4}), 24);
  EXPECT_EQ(numel({}), 1);
  EXPECT_EQ(numel({max_dim, 0}), 0);
  EXPECT_EQ(numel({std::int64_t{1} << 20, std::int64_t{1} << 20}), max_elements);
  const std::int64_t big = std::int64_t{1} << 32;
  test::expect_error([&] { (void)numel({big, big}); }, "shape [4294967296, 4294967296]: dimension 0 is 4294967296, above the limit of 2^31-1");
  test::expect_error([] { (void)numel({3, -1}, "argument b"); }, "argument b [3, -1]: dimension 1 is negative");
  test::expect_error([] { (void)numel({max_dim, max_dim}); }, "more than 2^40 elements");
  // A zero dimension does not hide the product of the others from kernels that multiply them.
  test::expect_error([] { (void)numel({max_dim, max_dim, 0}); }, "more than 2^40 elements");
  test::expect_error([] { (void)numel(Shape(9, 1)); }, "rank 9 is above the limit of 8");
  auto cpu = open_device("cpu");
  test::expect_error([&] { Tensor(cpu, {big, big}, DType::f32); }, "tensor [4294967296, 4294967296]");
  test::expect_error([&] { Tensor(cpu, {4, 4}, DType::f32).reshaped({-4, -4}); }, "dimension 0 is negative");
}

TEST(Shape, EveryKernelValidatesItsArgumentsBounds) {
  const std::int64_t big = std::int64_t{1} << 32;
  const Kernel& mm = Registry::global().kernel("matmul");
  Invocation inv;
  inv.kernel = "matmul";
  inv.options = {{"trans_a", false}, {"trans_b", false}};
  inv.args = {{{big, big}, DType::f32}, {{big, big}, DType::f32}, {{big, big}, DType::f32}};
  test::expect_error([&] { mm.validate(inv); }, "matmul: argument a f32 [4294967296, 4294967296]: dimension 0 is 4294967296");
  inv.args.pop_back();
  test::expect_error([&] { mm.validate(inv); }, "matmul takes 3 arguments (a, b, c), got 2");
  // The recipe path: sizes are bounded before a kernel multiplies them.
  test::expect_error([&] { (void)mm.from_sizes({{"m", big}, {"n", 1}, {"k", 1}}, DType::f32, nlohmann::json::object()); },
                     "matmul size 'm' is 4294967296, outside 0 to 2^31-1");
  test::expect_error([&] { (void)mm.from_sizes({{"m", 1}, {"n", 1}, {"k", 1}}, DType::f32, {{"trans_b", "maybe"}}); },
                     "matmul option 'trans_b' must be a boolean, got \"maybe\"");
  // Every kernel a recipe can name goes through the same bounds.
  for (const auto& name : Registry::global().kernels()) {
    const Kernel& k = Registry::global().kernel(name);
    if (k.size_names().empty()) continue;
    SCOPED_TRACE(name);
    std::map<std::string, std::int64_t> sizes = k.example_sizes();
    for (const auto& s : k.size_names())
      if (!sizes.count(s)) sizes[s] = 4;
    sizes[k.size_names().front()] = big;
    test::expect_error([&] { (void)k.from_sizes(sizes, DType::f32, nlohmann::json::object()); }, "outside 0 to 2^31-1");
  }
}

TEST(Invocation, FromJsonChecksEveryFieldExactly) {
  auto parse = [](const char* text) { return Invocation::from_json(nlohmann::json::parse(text)); };
  EXPECT_EQ(parse(R"({"kernel":"matmul","args":[{"shape":[2,3],"dtype":"f16"}]})").args[0].shape, (Shape{2, 3}));
  test::expect_error([&] { parse(R"({"kernel":"matmul","args":[{"shape":[2,-3],"dtype":"f16"}]})"); }, "dimension 1 is negative");
  test::expect_error([&] { parse(R"({"kernel":"matmul","args":[{"shape":[2.5],"dtype":"f16"}]})"); }, "args[0].shape must be a list of integers");
  test::expect_error([&] { parse(R"({"kernel":"matmul","args":[{"shape":[18446744073709551615],"dtype":"f16"}]})"); },
                     "from 0 to 2^31-1");
  test::expect_error([&] { parse(R"({"kernel":"matmul","args":[{"shape":[4294967296,4294967296],"dtype":"f32"}]})"); },
                     "above the limit of 2^31-1");
  test::expect_error([&] { parse(R"({"kernel":"matmul","args":[{"shape":"2","dtype":"f16"}]})"); }, "args[0].shape must be a list");
  test::expect_error([&] { parse(R"({"kernel":"matmul","args":[{"shape":[2],"dtype":16}]})"); }, "args[0].dtype must be text");
  test::expect_error([&] { parse(R"({"kernel":7,"args":[]})"); }, "'kernel' must be a non-empty text");
  test::expect_error([&] { parse(R"({"kernel":"matmul","args":{}})"); }, "'args' must be a list");
  test::expect_error([&] { parse(R"([1])"); }, "not a JSON object");
}

// 10,000 nested parentheses overflowed the stack; so did long chains of operators when the
// tree was evaluated, and long literals and products overflowed 64 bits.
TEST(Expr, NestingAndArithmeticAreBounded) {
  const std::string parens = std::string(10000, '(') + "1" + std::string(10000, ')');
  test::expect_error([&] { (void)Expr::parse(parens); }, "nested more than 100 levels deep");
  std::string chain = "1";
  for (int i = 0; i < 100000; ++i) chain += "+1";
  test::expect_error([&] { (void)Expr::parse(chain); }, "nested more than 100 levels deep");
  test::expect_error([&] { (void)Expr::parse(std::string(10000, '!') + "1"); }, "nested more than 100 levels deep");
  test::expect_error([&] { (void)Expr::parse(std::string(10000, '-') + "1"); }, "nested more than 100 levels deep");
  test::expect_error([&] { (void)Expr::parse("min(" + std::string(5000, '(') + "1, 2)"); }, "nested more than 100");
  EXPECT_EQ(Expr::parse(std::string(50, '(') + "7" + std::string(50, ')')).eval({}), 7);
  // Messages quote a long constraint cut short.
  try {
    (void)Expr::parse(parens);
  } catch (const InvalidArgument& e) {
    EXPECT_LT(std::string(e.what()).size(), 300u) << e.what();
  }
  test::expect_error([] { (void)Expr::parse("99999999999999999999 > 1"); }, "number too large");
  EXPECT_EQ(Expr::parse("9223372036854775807").eval({}), std::numeric_limits<std::int64_t>::max());
  test::expect_error([] { (void)Expr::parse("9223372036854775807 + 1").eval({}); }, "overflows 64 bits");
  test::expect_error([] { (void)Expr::parse("4294967296 * 4294967296").eval({}); }, "overflows 64 bits");
  test::expect_error([] { (void)Expr::parse("-9223372036854775807 - 2").eval({}); }, "overflows 64 bits");
  test::expect_error([] { (void)Expr::parse("(-9223372036854775807 - 1) / -1").eval({}); }, "overflows 64 bits");
  test::expect_error([] { (void)Expr::parse("-(-9223372036854775807 - 1)").eval({}); }, "overflows 64 bits");
}

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(detail::sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(detail::sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  std::string million(1000000, 'a');
  EXPECT_EQ(detail::sha256_hex(million), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Registry, KnowsMatmulAndRejectsMismatchedImplementations) {
  Registry& r = Registry::global();
  EXPECT_TRUE(r.has("matmul"));
  EXPECT_THROW(r.kernel("nope"), NotFound);
  EXPECT_EQ(r.implementations("matmul").front()->args(), r.kernel("matmul").args());
  auto impl = r.implementations("matmul").front();
  EXPECT_EQ(r.version(*impl).size(), 16u);
}

// Writers of one key racing readers: a reader sees nothing or a whole, correct file.
TEST(ProgramStore, ConcurrentWritersNeverShowAPartialFile) {
  test::TempDir dir;
  const ProgramStore store(dir.path / "programs");
  std::vector<unsigned char> bytes(1 << 20);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 131 + 7);
  EXPECT_FALSE(store.load("k"));
  std::atomic<int> wrong{0};
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&] {
        for (int i = 0; i < 10; ++i) store.store("k", bytes);
      });
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&] {
        for (int i = 0; i < 20; ++i)
          if (auto got = store.load("k"); got && *got != bytes) ++wrong;
      });
  }
  EXPECT_EQ(wrong.load(), 0);
  ASSERT_TRUE(store.load("k"));
  EXPECT_EQ(*store.load("k"), bytes);
  EXPECT_FALSE(store.load("other"));
  std::size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path / "programs")) files += e.is_regular_file();
  EXPECT_EQ(files, 1u) << "temporary files left behind";
}

}  // namespace
}  // namespace ejk
