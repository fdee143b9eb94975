// Device ceilings, rooflines and `ejk report`: the figures stored and read back, the share a
// result reaches, and the report's page as a headless Chromium renders it from a real run and
// tune on the cpu device.
#include <cstdlib>
#include <regex>

#include "cli_support.hpp"
#include "ejk/ejk.hpp"
#include "support.hpp"

namespace ejk {
namespace {

TEST(Roofline, TheLowerBoundApplies) {
  Ceilings c;
  c.copy = Figure{100e9, "copy"};             // 100 GB/s
  c.matmul[DType::f32] = Figure{1e12, "mm"};  // 1 TFLOP/s
  // 1 GFLOP over 10 MB: intensity 100 FLOP/B, 10 TFLOP/s by bandwidth: the peak bounds it.
  auto r = roofline(c, DType::f32, 1e9, 1e7, 2e6);  // 2 ms: 0.5 TFLOP/s
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->compute_bound);
  EXPECT_NEAR(r->share, 0.5, 1e-9);
  EXPECT_EQ(r->describe(), "50% of roofline (compute-bound)");
  // 1 MFLOP over 100 MB: intensity 0.01, 1 GFLOP/s by bandwidth: memory-bound.
  r = roofline(c, DType::f32, 1e6, 1e8, 4e6);  // 4 ms: 25 GB/s
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->compute_bound);
  EXPECT_NEAR(r->share, 0.25, 1e-9);
  // No FLOPs: the bandwidth alone; f16 without its own figure: f32's peak.
  r = roofline(c, DType::f16, 0, 1e8, 2e6);
  ASSERT_TRUE(r);
  EXPECT_NEAR(r->share, 0.5, 1e-9);
  EXPECT_EQ(c.peak_flops(DType::f16), 1e12);
  // Nothing to hold it to: no answer rather than a made-up one.
  EXPECT_FALSE(roofline(Ceilings{}, DType::f32, 1e9, 1e7, 1e6));
  Ceilings no_copy;
  no_copy.matmul[DType::f32] = Figure{1e12, ""};
  EXPECT_FALSE(roofline(no_copy, DType::f32, 1e9, 1e7, 1e6));
  EXPECT_FALSE(roofline(c, DType::f32, 1e9, 1e7, 0));
}

TEST(Roofline, CeilingsRoundTripThroughJsonAndTheCache) {
  Ceilings c;
  c.copy = Figure{12.5e9, "copy of 64 MiB"};
  c.matmul[DType::f32] = Figure{150e9, "matmul 1024^3"};
  c.matmul[DType::bf16] = Figure{300e9, "matmul 2048^3"};
  c.measured_unix = 1700000000;
  const Ceilings back = Ceilings::from_json(c.to_json());
  EXPECT_DOUBLE_EQ(back.bandwidth(), 12.5e9);
  EXPECT_DOUBLE_EQ(back.peak_flops(DType::bf16), 300e9);
  EXPECT_EQ(back.matmul.at(DType::f32).how, "matmul 1024^3");
  EXPECT_THROW(Ceilings::from_json({{"GB/s", -1}}), InvalidArgument);
  EXPECT_THROW(Ceilings::from_json({{"GFLOP/s", {{"f64", 1}}}}), InvalidArgument);

  test::TempDir dir;
  PersistentCache cache(dir / "ejk.sqlite");
  const DeviceInfo info = open_device("cpu")->info();
  EXPECT_FALSE(cache.ceilings(info.fingerprint()));  // none before a measurement, and no table yet
  cache.put_ceilings(DeviceRecord::of(info), c);
  auto got = cache.ceilings(info.fingerprint());
  ASSERT_TRUE(got);
  EXPECT_DOUBLE_EQ(got->peak_flops(DType::f32), 150e9);
  EXPECT_EQ(got->measured_unix, 1700000000);
  EXPECT_FALSE(cache.ceilings("another device"));
  // A new measurement replaces the old one whole.
  Ceilings again;
  again.copy = Figure{20e9, "copy"};
  cache.put_ceilings(DeviceRecord::of(info), again);
  got = cache.ceilings(info.fingerprint());
  ASSERT_TRUE(got);
  EXPECT_TRUE(got->matmul.empty());
  EXPECT_TRUE(cache.verify().ok);
}

class Report : public Cli {};

// What a headless Chromium made of the page: its DOM after parsing. Empty when chromium is absent.
std::string render(const std::string& file) {
  return shell("chromium --headless --no-sandbox --disable-gpu --dump-dom file://" + file + " 2>/dev/null").out;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The first element of `text` starting with `open` up to its closing `close`.
std::string element(const std::string& text, const std::string& open, const std::string& close) {
  const std::size_t a = text.find(open);
  if (a == std::string::npos) return "";
  const std::size_t b = text.find(close, a);
  return text.substr(a, b == std::string::npos ? std::string::npos : b + close.size() - a);
}

TEST_F(Report, CeilingsGiveRooflinesAndThePageRendersRunTuneAndCompare) {
  // Without ceilings nothing extra is said: Cli.RunPrintsATableAndGoogleBenchmarkJson.
  auto r = ejk("--device cpu devices --measure");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("ceilings: copy [0-9.]+ [kMGT]?B/s, matmul f32 [0-9.]+ [kMGT]?FLOP/s")))
      << r.out;

  r = ejk("run tiny.yaml --json run.json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("matmul/m:8/n:24/k:32/f32 .* [0-9]+% of roofline \\((compute|memory)-bound\\)")))
      << r.out;
  const auto run = nlohmann::json::parse(read("run.json"));
  ASSERT_TRUE(run["context"].contains("ceilings"));
  ASSERT_TRUE(run["benchmarks"][0].contains("roofline"));
  EXPECT_GT(run["benchmarks"][0]["roofline"]["share"].get<double>(), 0);
  ASSERT_EQ(ejk("run tiny.yaml --json run2.json").code, 0);

  r = ejk("tune tiny.yaml --json tune.json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("% of roofline ("), std::string::npos) << r.out;
  const auto tune = nlohmann::json::parse(read("tune.json"));
  const auto& row = tune["benchmarks"][0];
  ASSERT_TRUE(row.contains("candidates")) << row.dump();
  const std::size_t candidates = row["candidates"].size();
  ASSERT_GE(candidates, 2u);
  // The second workload's search also started from the first's tuned config (the nearest).
  const auto& second = tune["benchmarks"][1];
  ASSERT_TRUE(second.contains("warm_start")) << second.dump();
  EXPECT_NE(second["warm_start"].get<std::string>().find("persistent cache: nearest workload on this device, m 8 for 16"),
            std::string::npos)
      << second.dump();
  EXPECT_GE(second["evaluations_to_near_best"].get<int>(), 1);

  ASSERT_EQ(ejk("report tune.json -o tune.html").code, 0);
  ASSERT_EQ(ejk("report run.json run2.json -o compare.html").code, 0);
  // Everything above holds without a browser; what follows is the page as one renders it.
  if (std::system("command -v chromium >/dev/null 2>&1") != 0) {
    if (test::in_ci()) FAIL() << "chromium is not installed (scripts/setup installs it)";
    GTEST_SKIP() << "chromium is not installed (scripts/setup installs it): the report's page is not rendered";
  }
  const std::string page = render(path("tune.html"));
  ASSERT_NE(page.find("</html>"), std::string::npos) << "chromium rendered nothing";
  EXPECT_NE(page.find("<h3>matmul/m:8/n:24/k:32/f32</h3>"), std::string::npos);
  EXPECT_NE(page.find("<h3>matmul/m:16/n:24/k:32/f32</h3>"), std::string::npos);
  EXPECT_NE(page.find("of roofline ("), std::string::npos);
  // The first workload's first parameter plot: one mark per candidate, one of them the winner.
  const std::string workload = element(page, "<div class=\"workload\" data-name=\"matmul/m:8/n:24/k:32/f32\"", "</div>");
  const std::string plot = element(workload, "<svg class=\"param-plot\"", "</svg>");
  ASSERT_FALSE(plot.empty()) << workload;
  EXPECT_EQ(count(plot, "<g class=\"marker "), candidates) << plot;
  const std::regex winner("class=\"marker ok[^\"]* winner[ \"]");
  EXPECT_EQ(std::distance(std::sregex_iterator(plot.begin(), plot.end(), winner), std::sregex_iterator()), 1) << plot;
  EXPECT_NE(workload.find("winner: <code>" + row["label"].get<std::string>() + "</code>"), std::string::npos) << workload;
  const std::string warmed = element(page, "<div class=\"workload\" data-name=\"matmul/m:16/n:24/k:32/f32\"", "</div>");
  EXPECT_NE(warmed.find("<p class=\"warm-start\">warm start: <code>"), std::string::npos) << warmed;
  EXPECT_NE(warmed.find("<p class=\"near-best\">within 5% of the best after "), std::string::npos) << warmed;

  const std::string cmp = render(path("compare.html"));
  const std::string section = element(cmp, "<section class=\"compare\"", "</section>");
  ASSERT_FALSE(section.empty()) << cmp;
  for (const auto& b : run["benchmarks"]) {
    const std::string name = b["name"];
    const std::string one = element(section, "data-name=\"" + name + "\"", "</div>");
    EXPECT_TRUE(std::regex_search(one, std::regex("<p class=\"verdict\"><b>(same|faster|REGRESSION)</b>"))) << one;
    // Every sample of both runs is a dot.
    const std::size_t samples = b["samples_ns"].size();
    EXPECT_GE(count(one, "class=\"sample\""), samples) << one;
  }
  EXPECT_NE(section.find("geomean change"), std::string::npos);
}

TEST_F(Report, FailedCandidatesAreMarkedByTheirCategory) {
  write("tune.json", R"({"context": {"device": {"id": "cpu", "name": "a cpu"}}, "benchmarks": [{
    "name": "matmul/m:8/f32", "real_time": 2, "time_unit": "us", "label": "{\"mr\":4,\"v\":\"a\"}",
    "heuristic": {"mr": 8, "v": "a"},
    "candidates": [{"config": {"mr": 4, "v": "a"}, "status": "ok", "median_ns": 2000},
                   {"config": {"mr": 8, "v": "a"}, "status": "ok", "median_ns": 3000},
                   {"config": {"mr": 16, "v": "b"}, "status": "compile", "message": "too many registers"},
                   {"config": {"mr": 2, "v": "b"}, "status": "validation", "message": "wrong values"}]}]})");
  auto r = ejk("report tune.json -o tune.html");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string page = read("tune.html");
  EXPECT_NE(page.find("4</span> candidates measured, 2 failed (compile 1, validation 1)"), std::string::npos) << page;
  const std::string plot = element(page, "<svg class=\"param-plot\" data-param=\"mr\"", "</svg>");
  EXPECT_EQ(count(plot, "<g class=\"marker "), 4u) << plot;
  EXPECT_EQ(count(plot, "marker failed status-compile"), 1u) << plot;
  EXPECT_EQ(count(plot, "marker failed status-validation"), 1u) << plot;
  EXPECT_EQ(count(plot, "marker ok winner"), 1u) << plot;
  EXPECT_EQ(count(plot, "marker ok heuristic"), 1u) << plot;
  // Numbers in their order, not as text: 2 before 16.
  EXPECT_LT(plot.find(">2</text>"), plot.find(">16</text>")) << plot;
}

TEST_F(Report, BadInputsNameTheFile) {
  auto r = ejk("report missing.json -o out.html");
  EXPECT_EQ(r.code, 5) << r.out;
  EXPECT_NE(r.out.find("missing.json"), std::string::npos) << r.out;
  write("broken.json", "{\"benchmarks\": [");
  r = ejk("report broken.json -o out.html");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("broken.json"), std::string::npos) << r.out;
  write("shape.json", R"({"benchmarks": [{"name": "a", "real_time": 1, "candidates": 3}]})");
  r = ejk("report shape.json -o out.html");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("shape.json: benchmarks[0] (a): 'candidates' must be an array"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(path("out.html")));
  r = ejk("report shape.json");
  EXPECT_EQ(r.code, 2) << r.out;  // -o is required
  // Nothing to compare is said on the page, not a failure of the page.
  write("empty.json", R"({"benchmarks": []})");
  r = ejk("report empty.json empty.json -o empty.html");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(read("empty.html").find("no benchmark to compare against"), std::string::npos);
}

}  // namespace
}  // namespace ejk
