// The ejk program end to end: every subcommand's happy path, golden output shapes, located
// errors with their exit codes, and bundles that must be refused without touching the cache.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>

#include "cli_support.hpp"
#include "select_support.hpp"
#include "support.hpp"

namespace ejk {
namespace {

namespace fs = std::filesystem;

// Digits vary from run to run and machine to machine; the shape of the output does not.
std::string shape_of(const std::string& s) {
  return std::regex_replace(std::regex_replace(s, std::regex("[0-9]+(\\.[0-9]+)?"), "N"), std::regex(" +"), " ");
}

TEST_F(Cli, RunPrintsATableAndGoogleBenchmarkJson) {
  auto r = ejk("run tiny.yaml --json run.json");
  ASSERT_EQ(r.code, 0) << r.out;
  std::istringstream lines(r.out);
  std::string header, row;
  std::getline(lines, header);
  std::getline(lines, row);
  EXPECT_EQ(shape_of(header), "workload median ±IQR FLOP/s B/s tier config");
  EXPECT_EQ(row.rfind("matmul/m:8/n:24/k:32/f32", 0), 0u) << row;
  EXPECT_NE(row.find("heuristic"), std::string::npos) << row;
  auto j = nlohmann::json::parse(read("run.json"));
  EXPECT_EQ(j["context"]["device"]["id"], "cpu");
  EXPECT_TRUE(j["context"].contains("ejk_build"));
  ASSERT_EQ(j["benchmarks"].size(), 2u);
  const auto& b = j["benchmarks"][0];
  EXPECT_EQ(b["name"], "matmul/m:8/n:24/k:32/f32");
  EXPECT_EQ(b["time_unit"], "us");
  EXPECT_GT(b["real_time"].get<double>(), 0);
  EXPECT_GT(b["GFLOP/s"].get<double>(), 0);
  EXPECT_GE(b["samples_ns"].size(), 10u);
  EXPECT_EQ(b["tier"], "heuristic");
  // No ceilings measured (ejk devices --measure): no roofline, in the table or the JSON.
  EXPECT_FALSE(j["context"].contains("ceilings"));
  EXPECT_FALSE(b.contains("roofline"));
}

// --passes: each kernel launch of one more run under its row and in the JSON; on the cpu device
// the whole run, on Vulkan each dispatch (matmul: one) by its module's name.
TEST_F(Cli, RunPassesListsEachLaunch) {
  auto r = ejk("run tiny.yaml --passes --json run.json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\n  (all) "), std::string::npos) << r.out;
  auto j = nlohmann::json::parse(read("run.json"));
  ASSERT_EQ(j["benchmarks"][0]["passes"].size(), 1u);
  EXPECT_EQ(j["benchmarks"][0]["passes"][0]["name"], "(all)");
  EXPECT_GT(j["benchmarks"][0]["passes"][0]["ns"].get<double>(), 0);

  auto v = ejk("--device vulkan:0 run tiny.yaml --passes --json vk.json");
  ASSERT_EQ(v.code, 0) << v.out;
  auto k = nlohmann::json::parse(read("vk.json"));
  const auto& passes = k["benchmarks"][0]["passes"];
  ASSERT_GE(passes.size(), 1u);
  for (const auto& p : passes) {
    EXPECT_NE(p["name"].get<std::string>().find("matmul"), std::string::npos) << p;
    EXPECT_GE(p["ns"].get<double>(), 0);
  }
  EXPECT_NE(v.out.find("\n  " + passes[0]["name"].get<std::string>() + " "), std::string::npos) << v.out;
  // Without the flag, no passes.
  auto plain = ejk("run tiny.yaml --json plain.json");
  ASSERT_EQ(plain.code, 0) << plain.out;
  EXPECT_FALSE(nlohmann::json::parse(read("plain.json"))["benchmarks"][0].contains("passes"));
}

// Ctrl-C during a long run: the workload under way finishes, the JSON file holds every finished
// row (the ones printed), and the exit code says it was interrupted.
TEST_F(Cli, AnInterruptedRunKeepsItsFinishedRows) {
  write("long.yaml",
        "name: long\ndevice: cpu\nworkloads:\n  - kernel: matmul\n"
        "    shape: {m: [8, 9, 10, 11, 12, 13, 14, 15, 16, 17], n: [8, 9, 10, 11, 12, 13, 14, 15, 16, 17], "
        "k: [8, 9, 10, 11, 12, 13, 14, 15, 16, 17]}\n");
  // The signal comes once the first row is in the file, so at least one row is finished.
  const std::string cmd = "cd " + dir_.string() + "; EJK_CACHE_DIR=" + path("cache") + " EJK_PROFILE_DIR=" + path("none") +
                          " " EJK_CLI_PATH " run long.yaml --json run.json >out.txt 2>&1 & pid=$!; i=0; "
                          "while [ ! -s run.json ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; kill -INT $pid; wait $pid";
  Result r;
  const int status = std::system(cmd.c_str());
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read("out.txt");
  ASSERT_EQ(r.code, 130) << r.out;
  EXPECT_NE(r.out.find("ejk: interrupted"), std::string::npos) << r.out;
  auto j = nlohmann::json::parse(read("run.json"));
  const std::size_t rows = j["benchmarks"].size();
  EXPECT_GE(rows, 1u);
  EXPECT_LT(rows, 1000u);
  std::size_t printed = 0;
  for (std::size_t at = r.out.find("\nmatmul/"); at != std::string::npos; at = r.out.find("\nmatmul/", at + 1)) ++printed;
  EXPECT_EQ(printed, rows) << r.out;
}

// Rates read in the unit that suits them.
TEST_F(Cli, RatesPrintWithAFittingPrefix) {
  auto r = ejk("run tiny.yaml");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(" [0-9.]+ [kMGT]?FLOP/s ")));
  EXPECT_TRUE(std::regex_search(r.out, std::regex(" [0-9.]+ [kMGT]?B/s ")));
}

TEST_F(Cli, TuneStoresThenRunUsesTheCacheThenExportImportRoundTrip) {
  auto t = ejk("tune tiny.yaml --json tune.json");
  ASSERT_EQ(t.code, 0) << t.out;
  EXPECT_EQ(shape_of(t.out.substr(0, t.out.find('\n'))),
            "workload heuristic tuned speedup FLOP/s evals config");
  auto again = ejk("tune tiny.yaml");
  EXPECT_NE(again.out.find("already tuned"), std::string::npos) << again.out;
  auto run = ejk("run tiny.yaml");
  EXPECT_NE(run.out.find("persistent"), std::string::npos) << run.out;
  auto ls = ejk("cache ls");
  EXPECT_NE(ls.out.find("(2 entries)"), std::string::npos) << ls.out;
  EXPECT_EQ(ejk("cache show 1").code, 0);
  EXPECT_EQ(ejk("cache verify").code, 0);

  auto ex = ejk("export -o bundle.json");
  ASSERT_EQ(ex.code, 0) << ex.out;
  EXPECT_NE(ex.out.find("exported 2 entries"), std::string::npos) << ex.out;
  EXPECT_EQ(ejk("cache rm 1").code, 0);
  auto im = ejk("import bundle.json");
  ASSERT_EQ(im.code, 0) << im.out;
  EXPECT_NE(im.out.find("1 added, 0 replaced, 1 kept"), std::string::npos) << im.out;
  auto ow = ejk("import bundle.json --merge overwrite");
  EXPECT_NE(ow.out.find("0 added, 2 replaced, 0 kept"), std::string::npos) << ow.out;
}

TEST_F(Cli, RecordReplayRoundTrip) {
  auto rec = ejk("record tiny.yaml -o trace.jsonl");
  ASSERT_EQ(rec.code, 0) << rec.out;
  auto viaCommand = ejk("record -o trace2.jsonl -- " EJK_CLI_PATH " run tiny.yaml");
  ASSERT_EQ(viaCommand.code, 0) << viaCommand.out;
  for (const char* t : {"trace.jsonl", "trace2.jsonl"}) {
    std::string text = read(t);
    EXPECT_GE(std::count(text.begin(), text.end(), '\n'), 2) << t;
    EXPECT_NE(text.find("\"kernel\":\"matmul\""), std::string::npos) << text;
  }
  auto replay = ejk("replay trace.jsonl");
  EXPECT_EQ(replay.code, 0) << replay.out;
  auto tune = ejk("tune trace.jsonl --evals 3");
  EXPECT_EQ(tune.code, 0) << tune.out;
  EXPECT_NE(ejk("cache ls").out.find("(2 entries)"), std::string::npos);
}

TEST_F(Cli, DevicesAndKernels) {
  auto d = ejk("devices --json devices.json");
  ASSERT_EQ(d.code, 0) << d.out;
  EXPECT_EQ(d.out.rfind("cpu", 0), 0u) << d.out;
  EXPECT_EQ(nlohmann::json::parse(read("devices.json"))[0]["id"], "cpu");
  auto k = ejk("kernels");
  EXPECT_NE(k.out.find("matmul"), std::string::npos);
  auto s = ejk("kernels --space matmul --size m=64 --device cpu");
  EXPECT_EQ(s.code, 0) << s.out;
  EXPECT_NE(s.out.find("where mc % mr == 0"), std::string::npos) << s.out;
  EXPECT_NE(ejk("--help").out.find("tune"), std::string::npos);
  EXPECT_NE(ejk("tune --help").out.find("example: ejk tune"), std::string::npos);
}

// Sizes the user leaves out come from the kernel's example workload, each given size overrides
// its own: attention gets a decoder layer's heads and head_dim, not 1024 of everything.
TEST_F(Cli, KernelSpacesFillMissingSizesFromTheKernelsExample) {
  auto mm = ejk("kernels --space matmul --size k=64 --device cpu");
  ASSERT_EQ(mm.code, 0) << mm.out;
  EXPECT_NE(mm.out.find("\"shape\":[1024,64]"), std::string::npos) << mm.out;
  EXPECT_NE(mm.out.find("\"shape\":[64,1024]"), std::string::npos) << mm.out;
  for (const char* kernel : {"flash_attention", "flash_attention_bwd"}) {
    auto fa = ejk(std::string("kernels --space ") + kernel + " --device cpu");
    ASSERT_EQ(fa.code, 0) << fa.out;
    EXPECT_NE(fa.out.find("\"shape\":[1,2048,16,128]"), std::string::npos) << kernel << "\n" << fa.out;
    auto sized = ejk(std::string("kernels --space ") + kernel + " --size seq=256 --size kv_heads=4 --device cpu");
    ASSERT_EQ(sized.code, 0) << sized.out;
    EXPECT_NE(sized.out.find("\"shape\":[1,256,16,128]"), std::string::npos) << kernel << "\n" << sized.out;
    EXPECT_NE(sized.out.find("\"shape\":[1,256,4,128]"), std::string::npos) << kernel << "\n" << sized.out;
  }
}

TEST_F(Cli, MalformedRecipesGiveLocatedErrorsAndExitCode2) {
  const std::pair<std::string, std::string> cases[] = {
      {"name: x\nworkloads:\n  - kernel: matmul\n    shape: {m: 1, n: true, k: 1}\n", "bad.yaml:4:22: size 'n' must be an integer"},
      {"name: x\nworkloads:\n  - kernel: attention9\n    shape: {m: 1}\n", "bad.yaml:3:13: unknown kernel 'attention9' (allowed:"},
      {"name: x\nworkloads: []\nextra: 1\n", "bad.yaml:3:1: unknown key 'extra' in the recipe"},
      {"name: x\nworkloads:\n  - kernel: matmul\n   shape: {m: 1}\n", "bad.yaml:4:"},
  };
  for (const auto& [yaml, expected] : cases) {
    write("bad.yaml", yaml);
    auto r = ejk("run bad.yaml");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find(expected), std::string::npos) << r.out;
  }
  EXPECT_EQ(ejk("run tiny.yaml --device metal:0").code, 2);
}

// docs/cli.md: an unreadable file is an I/O error (5); CLI11's own check made it a usage error.
TEST_F(Cli, MissingFilesAreIoErrors) {
  for (const char* cmd : {"run missing.yaml", "tune missing.yaml", "replay missing.jsonl", "run missing.jsonl", "run ."}) {
    auto r = ejk(cmd);
    EXPECT_EQ(r.code, 5) << cmd << ": " << r.out;
    EXPECT_NE(r.out.find("cannot read "), std::string::npos) << r.out;
  }
  EXPECT_NE(ejk("run missing.yaml").out.find("cannot read recipe missing.yaml: No such file or directory"), std::string::npos);
}

// m = n = k = 2^32 wrapped the element count to 0: run and replay crashed, and tune --isolate
// stored a "tuned" entry of 3.3 us. Now every entry point refuses it before anything runs.
TEST_F(Cli, HugeSizesAreRefusedBeforeAnythingRuns) {
  write("huge.yaml", "name: huge\ndevice: cpu\nworkloads:\n  - kernel: matmul\n    shape: {m: 4294967296, n: 4294967296, k: 4294967296}\n");
  // Each dimension within its bound, the arguments beyond any memory.
  write("big.yaml", "name: big\ndevice: cpu\nworkloads:\n  - kernel: matmul\n    shape: {m: 1000000, n: 1000000, k: 1000000}\n");
  const std::string arg = R"({"shape":[4294967296,4294967296],"dtype":"f32"})";
  write("huge.jsonl", "\n{\"kernel\":\"matmul\",\"args\":[" + arg + "," + arg + "," + arg + "]}\n");
  write("mismatch.jsonl", R"({"kernel":"matmul","args":[{"shape":[2,3],"dtype":"f32"},{"shape":[4,4],"dtype":"f32"},{"shape":[2,4],"dtype":"f32"}]})"
                          "\n");
  const std::pair<std::string, std::string> cases[] = {
      {"huge.yaml", "huge.yaml:5:16: size 'm' must be an integer from 0 to 2147483647, got 4294967296"},
      {"big.yaml", "big.yaml:4:5: matmul: argument a [1000000, 1000000] f32 takes 3.6 TiB, more than cpu's largest buffer"},
      {"huge.jsonl", "huge.jsonl:2: args[0] (matmul) [4294967296, 4294967296]: dimension 0 is 4294967296"},
      {"mismatch.jsonl", "mismatch.jsonl:1: matmul: inner dimensions differ"},
  };
  for (const auto& [file, expected] : cases)
    for (const std::string cmd : {"run ", "tune --isolate ", "tune ", "replay "}) {
      if (cmd == "replay " && file.ends_with(".yaml")) continue;
      auto r = ejk(cmd + file);
      EXPECT_EQ(r.code, file == "huge.jsonl" ? 5 : 2) << cmd << file << ": " << r.out;
      EXPECT_NE(r.out.find(expected), std::string::npos) << cmd << file << ": " << r.out;
    }
  EXPECT_NE(ejk("cache ls").out.find("(0 entries)"), std::string::npos);
}

TEST_F(Cli, OptionsAreReadExactly) {
  const std::pair<std::string, std::string> cases[] = {
      {"tune tiny.yaml --evals -5", "--evals -5: must be an integer from 0 to 2147483647"},
      {"tune tiny.yaml --evals 4294967297", "--evals 4294967297: must be an integer from 0 to 2147483647"},
      {"tune tiny.yaml --evals 3x", "--evals 3x: must be an integer"},
      {"tune tiny.yaml --seconds nan", "--seconds nan: must be a number from 0 to 1000000000"},
      {"tune tiny.yaml --seconds -1", "--seconds -1: must be a number from 0 to 1000000000"},
      {"tune tiny.yaml --seed -1", "--seed -1: must be an integer from 0 to 9223372036854775807"},
      {"kernels --space matmul --size m=12abc", "--size m 12abc: must be an integer from 0 to 2147483647"},
      {"kernels --space matmul --size m=4294967296", "--size m 4294967296: must be an integer from 0 to 2147483647"},
  };
  for (const auto& [cmd, expected] : cases) {
    auto r = ejk(cmd);
    EXPECT_EQ(r.code, 2) << cmd << ": " << r.out;
    EXPECT_NE(r.out.find(expected), std::string::npos) << cmd << ": " << r.out;
  }
  EXPECT_NE(ejk("cache ls").out.find("(0 entries)"), std::string::npos);
}

// A constraint naming no parameter (a typo) was dropped without a word; device mistakes had no
// place; an option of the wrong type was an internal error.
TEST_F(Cli, RecipeMistakesFoundLateStillNameTheirPlace) {
  const std::string wl = "workloads:\n  - kernel: matmul\n    shape: {m: 8, n: 8, k: 8}\n";
  const std::pair<std::string, std::string> cases[] = {
      {"name: x\ndevice: cpu\n" + wl + "tune: {constraints: [\"mcc >= 96\"]}\n",
       "bad.yaml:6:22: constraint 'mcc >= 96' reads no parameter of any workload's space (matmul on cpu: "},
      {"name: x\ndevice: cpu\n" + wl + "tune: {constraints: [\"mc >= 96 && sizee > 1\"]}\n",
       "bad.yaml:6:22: constraint 'mc >= 96 && sizee > 1' reads 'sizee', which matmul on cpu has neither as a parameter"},
      {"name: x\ndevice: vulkan:99\n" + wl, "bad.yaml:2:9: device 'vulkan:99' not found"},
      {"name: x\ndevice: gpu\n" + wl, "bad.yaml:2:9: unknown device 'gpu' (allowed: auto, cpu, opencl:N, vulkan:N, cuda:N)"},
      {"name: x\n" + wl + "    options: {trans_b: maybe}\n", "bad.yaml:3:5: matmul option 'trans_b' must be a boolean"},
  };
  for (const auto& [yaml, expected] : cases) {
    write("bad.yaml", yaml);
    auto r = ejk("tune bad.yaml");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find(expected), std::string::npos) << r.out;
  }
  EXPECT_NE(ejk("cache ls").out.find("(0 entries)"), std::string::npos);
}

TEST_F(Cli, BadBundlesAreRefusedAndTheCacheIsUntouched) {
  ASSERT_EQ(ejk("tune tiny.yaml").code, 0);
  ASSERT_EQ(ejk("export -o good.json").code, 0);
  const std::string before = ejk("cache ls").out;
  std::string good = read("good.json");

  write("truncated.json", good.substr(0, good.size() / 2));
  auto bundle = nlohmann::json::parse(good);
  auto tampered = bundle;
  tampered["entries"][0]["stats"]["median_ns"] = 1.0;
  write("tampered.json", tampered.dump());
  auto future = bundle;
  future["schema_version"] = 99;
  write("future.json", future.dump());
  auto other = bundle;
  for (auto& e : other["entries"]) e["fingerprint"] = "vulkan|NVIDIA|H200|580";
  other["devices"] = {{{"fingerprint", "vulkan|NVIDIA|H200|580"}, {"backend", "vulkan"}, {"vendor", "NVIDIA"},
                       {"name", "H200"}, {"driver", "580"}, {"architecture", "sm_90"}}};
  other.erase("sha256");
  write("other.json", other.dump());

  for (const char* f : {"truncated.json", "tampered.json", "future.json"}) {
    auto r = ejk(std::string("import ") + f);
    EXPECT_EQ(r.code, 5) << f << ": " << r.out;
    EXPECT_NE(r.out.find(f), std::string::npos) << r.out;
  }
  EXPECT_NE(ejk("import tampered.json").out.find("checksum"), std::string::npos);
  EXPECT_NE(ejk("import future.json").out.find("schema"), std::string::npos);
  auto o = ejk("import other.json");
  EXPECT_NE(o.code, 0) << o.out;
  EXPECT_EQ(ejk("cache ls").out, before);
}

// Every refusal of a bundle: exit 5, the file named, and the cache's tables as they were, not
// one row written (import validates every entry before the first write and merges in one
// transaction).
TEST_F(Cli, ImportIsAllOrNothingAndBelievesNothing) {
  ASSERT_EQ(ejk("tune tiny.yaml").code, 0);
  ASSERT_EQ(ejk("export -o good.json").code, 0);
  const Bundle good = read_bundle(path("good.json"));
  ASSERT_EQ(good.entries.size(), 2u);
  ASSERT_EQ(ejk("cache rm 1").code, 0);  // good.entries[0] is no longer cached: an import would add it
  const fs::path db = path("cache") + "/ejk.sqlite";
  const std::string before = test::dump_tables(db);

  auto bundle = [&](const std::string& name, const std::function<void(Bundle&)>& edit) {
    Bundle b = good;
    edit(b);
    write_bundle(path(name), b);
  };
  auto text = [&](const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = nlohmann::json::parse(read("good.json"));
    edit(j);
    write(name, j.dump(1));
  };
  // A valid entry first, an invalid one after it.
  bundle("tiny-median.json", [](Bundle& b) { b.entries[1].stats = {1e-300, 0, 1e-300, 15}; });
  bundle("unknown-kernel.json", [](Bundle& b) { b.entries[1].kernel = "nosuchkernel"; });
  text("schema-fraction.json", [](auto& j) { j["schema_version"] = 1.5; });
  text("schema-wraps.json", [](auto& j) { j["schema_version"] = 4294967297ull; });
  text("entries-object.json", [](auto& j) { j["entries"] = {{"a", j["entries"][0]}}; });
  text("n-wraps.json", [](auto& j) { j["entries"][1]["stats"]["n"] = 4294967297ull; });
  text("negative-iqr.json", [](auto& j) { j["entries"][1]["stats"]["iqr_ns"] = -1; });
  text("string-median.json", [](auto& j) { j["entries"][1]["stats"]["median_ns"] = "1"; });
  std::string g = read("good.json");
  write("huge-number.json", std::regex_replace(g, std::regex("\"median_ns\": [0-9.e+]+"), "\"median_ns\": 1e400"));
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  write("deep.json", std::regex_replace(g, std::regex("\"config\": \\{"), "\"config\": {\"x\": " + deep + ", "));
  const std::pair<std::string, std::string> cases[] = {
      {"tiny-median.json", "a median of 1e-300 ns, below 1 ns"},
      {"unknown-kernel.json", "kernels this ejk does not have (nosuchkernel)"},
      {"schema-fraction.json", "schema_version must be an integer, got 1.5"},
      {"schema-wraps.json", "bundle schema version 4294967297 is newer"},
      {"entries-object.json", "'entries' must be an array, got an object"},
      {"n-wraps.json", "entries[1] (matmul): malformed cache entry: 'n' must be an integer from 0 to 2147483647"},
      {"negative-iqr.json", "'iqr_ns' must not be negative"},
      {"string-median.json", "'median_ns' must be a number, got a string"},
      {"huge-number.json", "1e400"},
      {"deep.json", "nested deeper than 64 levels"},
  };
  for (const auto& [file, expected] : cases)
    for (const char* merge : {"faster", "overwrite", "keep"}) {
      SCOPED_TRACE(file + " --merge " + merge);
      auto r = ejk("import " + file + " --any-device --merge " + merge);
      EXPECT_EQ(r.code, 5) << r.out;
      EXPECT_NE(r.out.find("ejk: " + file), std::string::npos) << r.out;
      EXPECT_NE(r.out.find(expected), std::string::npos) << r.out;
      EXPECT_EQ(test::dump_tables(db), before) << r.out;
    }

  // The local device's row comes from the machine: a bundle describing it otherwise changes nothing.
  bundle("renamed.json", [](Bundle& b) {
    b.devices[0].name = "Renamed by a bundle";
    b.devices[0].architecture = "other";
    for (auto& e : b.entries) e.stats = {e.stats.median_ns / 2, 0, e.stats.median_ns / 2, 5};
  });
  auto devices_rows = [&] {
    std::string all = test::dump_tables(db);
    return all.substr(0, all.find("entries:"));
  };
  const std::string devices_before = devices_rows();
  auto r = ejk("import renamed.json --merge overwrite");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("1 added, 1 replaced"), std::string::npos) << r.out;
  EXPECT_EQ(devices_rows(), devices_before);
  EXPECT_EQ(devices_before.find("Renamed"), std::string::npos);

  // Text from a bundle reaches the terminal escaped: a C1 control sequence introducer and a
  // right-to-left override in an option of the signature.
  bundle("controls.json", [](Bundle& b) {
    auto sig = nlohmann::json::parse(b.entries[0].signature);
    sig["options"]["note"] = "\xc2\x9b" "2J\xe2\x80\xae" "evil";
    b.entries[0].signature = sig.dump();
  });
  ASSERT_EQ(ejk("import controls.json").code, 0);
  for (const char* cmd : {"cache ls", "cache show note"}) {
    auto shown = ejk(cmd);
    EXPECT_EQ(shown.code, 0) << shown.out;
    EXPECT_EQ(shown.out.find("\xc2\x9b"), std::string::npos) << cmd;
    EXPECT_EQ(shown.out.find("\xe2\x80\xae"), std::string::npos) << cmd;
    EXPECT_NE(shown.out.find("\\u009b2J\\u202eevil"), std::string::npos) << shown.out;
  }
}

TEST_F(Cli, CacheEntryNumbersOutOfRangeAreUsageErrors) {
  ASSERT_EQ(ejk("tune tiny.yaml").code, 0);
  for (const char* cmd : {"cache show 12345678901234567890123", "cache rm 12345678901234567890123", "cache show 0",
                          "cache rm 3", "cache show ''"}) {
    SCOPED_TRACE(cmd);
    auto r = ejk(cmd);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_EQ(r.out.find("internal error"), std::string::npos) << r.out;
  }
  EXPECT_NE(ejk("cache show 12345678901234567890123").out.find("no cache entry #12345678901234567890123"),
            std::string::npos);
  EXPECT_NE(ejk("cache show 3").out.find("has 2 entries, numbered 1 to 2"), std::string::npos) << ejk("cache show 3").out;
  EXPECT_EQ(ejk("cache show nosuchpart").code, 3);
  EXPECT_NE(ejk("cache ls").out.find("(2 entries)"), std::string::npos) << "nothing was removed";
}

TEST_F(Cli, TuneFailsWhenNothingCanBeStored) {
  write("blocker", "a file where the cache folder would be\n");
  auto r = ejk("--cache-dir blocker/cache tune tiny.yaml");
  EXPECT_EQ(r.code, 5) << r.out;
  EXPECT_NE(r.out.find("blocker/cache"), std::string::npos) << r.out;
}

TEST_F(Cli, JsonOutputFailuresNameTheFileAndLeaveNoTemporaryFile) {
  fs::create_directories(path("taken/inside"));
  auto r = ejk("cache ls --json taken");
  EXPECT_EQ(r.code, 5) << r.out;
  EXPECT_NE(r.out.find("cannot write taken"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("Success"), std::string::npos) << r.out;
  // A full disk, as a file size limit: writes fail with EFBIG.
  auto full = ejk("run tiny.yaml --json out.json", "trap '' XFSZ && ulimit -f 2 &&");
  EXPECT_EQ(full.code, 5) << full.out;
  EXPECT_NE(full.out.find("cannot write out.json: File too large"), std::string::npos) << full.out;
  for (const auto& f : fs::directory_iterator(dir_)) {
    const std::string name = f.path().filename().string();
    EXPECT_TRUE(name.find(".tmp") == std::string::npos && name.rfind("out.json", 0) != 0) << name;
  }
}

TEST_F(Cli, BadProfilesAreReportedAndDoNotStopARun) {
  fs::create_directories(path("none"));
  // Complete but for a config nested 100,000 levels: it used to be read far enough to overflow the stack.
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "{\"a\":";
  deep += "1" + std::string(100000, '}');
  write("none/deep.json",
        R"({"schema_version": 1, "devices": [{"fingerprint": "f", "backend": "cpu", "vendor": "v", "name": "n",
            "driver": "d", "architecture": "a"}], "sha256": "0",
            "entries": [{"fingerprint": "f", "kernel": "matmul", "version": "1", "signature": "{}", "provenance": {},
                         "stats": {"median_ns": 1, "iqr_ns": 0, "min_ns": 1, "n": 1}, "config": )" + deep + "}]}");
  write("none/types.json", R"({"schema_version": 1, "devices": {}, "entries": "all", "sha256": 1})");
  auto r = ejk("run tiny.yaml");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("skipping profile bundle " + path("none/deep.json")), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("skipping profile bundle " + path("none/types.json")), std::string::npos) << r.out;
}

TEST_F(Cli, CompareRefusesMissingBenchmarksBadOptionsAndBadInputs) {
  auto doc = [](const std::vector<std::string>& names, double scale) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& n : names) {
      nlohmann::json samples = nlohmann::json::array();
      for (int i = 0; i < 20; ++i) samples.push_back(scale * (1000.0 + 7 * (i % 5)));
      rows.push_back({{"name", n}, {"real_time", scale}, {"time_unit", "us"}, {"samples_ns", samples}});
    }
    return nlohmann::json{{"benchmarks", rows}}.dump();
  };
  write("base.json", doc({"w", "x"}, 1.0));
  write("renamed.json", doc({"w", "x2"}, 1.0));
  write("twice.json", doc({"w", "x"}, 2.0));
  write("none.json", doc({}, 1.0));
  write("empty.json", "");
  auto renamed = ejk("compare base.json renamed.json");
  EXPECT_EQ(renamed.code, 2) << renamed.out;
  EXPECT_TRUE(std::regex_search(renamed.out, std::regex("\nx +missing in new\n"))) << renamed.out;
  EXPECT_NE(renamed.out.find("1 of 2 benchmarks of base.json have no samples in renamed.json"), std::string::npos)
      << renamed.out;
  EXPECT_EQ(ejk("compare base.json renamed.json --allow-missing").code, 0);
  EXPECT_EQ(ejk("compare base.json none.json").code, 2);
  EXPECT_EQ(ejk("compare base.json none.json --allow-missing").code, 2) << "nothing compared is no pass";
  auto empty = ejk("compare base.json empty.json");
  EXPECT_EQ(empty.code, 2) << empty.out;
  EXPECT_NE(empty.out.find("empty.json:1:1: not valid JSON"), std::string::npos) << empty.out;
  EXPECT_EQ(ejk("compare base.json missing.json").code, 5);

  EXPECT_EQ(ejk("compare base.json twice.json").code, 1);
  auto effect = ejk("compare base.json twice.json --min-effect 5");
  EXPECT_EQ(effect.code, 2) << effect.out;
  EXPECT_NE(effect.out.find("is a fraction"), std::string::npos) << effect.out;
  EXPECT_NE(effect.out.find("0.05"), std::string::npos) << effect.out;
  for (const char* alpha : {"nan", "0", "1", "-1", "inf"}) {
    auto a = ejk(std::string("compare base.json twice.json --alpha ") + alpha);
    EXPECT_EQ(a.code, 2) << alpha << ": " << a.out;
  }

  auto bad = nlohmann::json::parse(doc({"w"}, 1.0));
  bad["benchmarks"][0]["samples_ns"] = "1000";
  write("bad.json", bad.dump());
  auto types = ejk("compare base.json bad.json");
  EXPECT_EQ(types.code, 2) << types.out;
  EXPECT_NE(types.out.find("bad.json: benchmarks[0] (w): 'samples_ns' must be an array"), std::string::npos) << types.out;
  write("object.json", R"({"benchmarks": {"w": 1}})");
  EXPECT_EQ(ejk("compare object.json base.json").code, 2);
  write("huge.json", R"({"benchmarks": [{"name": "w", "real_time": 1e400}]})");
  auto huge = ejk("compare base.json huge.json");
  EXPECT_EQ(huge.code, 2) << huge.out;
  EXPECT_NE(huge.out.find("huge.json:1:"), std::string::npos) << huge.out;
}

TEST_F(Cli, CompareFlagsASlowdownAndStaysQuietOnAA) {
  auto doc = [](double scale) {
    nlohmann::json samples = nlohmann::json::array();
    for (int i = 0; i < 20; ++i) samples.push_back(scale * (1000.0 + 7 * (i % 5)));
    return nlohmann::json{{"benchmarks", {{{"name", "w"}, {"real_time", scale}, {"time_unit", "us"}, {"samples_ns", samples}}}}}.dump();
  };
  write("base.json", doc(1.0));
  write("same.json", doc(1.0));
  write("slow.json", doc(1.2));
  auto aa = ejk("compare base.json same.json");
  EXPECT_EQ(aa.code, 0) << aa.out;
  auto slow = ejk("compare base.json slow.json");
  EXPECT_EQ(slow.code, 1) << slow.out;
  EXPECT_NE(slow.out.find("REGRESSION"), std::string::npos) << slow.out;
  EXPECT_NE(slow.out.find("geomean change +20.0%"), std::string::npos) << slow.out;
}

}  // namespace
}  // namespace ejk
