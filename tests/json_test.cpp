// JSON from files: bounded nesting and size, duplicate keys and out-of-range numbers refused
// with a place; JSON to files: whole or not at all; text from files made safe for a terminal.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "ejk/config.hpp"
#include "ejk/error.hpp"
#include "ejk/json.hpp"
#include "ejk/text.hpp"
#include "support.hpp"

namespace ejk {
namespace {

namespace fs = std::filesystem;

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

// The message parse_json refuses `text` with ("" when it parses).
std::string refusal(const std::string& text, const JsonLimits& limits = {}) {
  try {
    parse_json(text, "in.json", limits);
    return "";
  } catch (const InvalidArgument& e) {
    return e.what();
  }
}

std::string nested(std::size_t depth, const std::string& open = "[", const std::string& close = "]") {
  std::string s;
  for (std::size_t i = 0; i < depth; ++i) s += open;
  s += "1";
  for (std::size_t i = 0; i < depth; ++i) s += close;
  return s;
}

TEST(Json, DeepNestingIsRefusedWithItsPlace) {
  EXPECT_EQ(refusal(nested(64)), "");
  const std::string deep = refusal(nested(100000));
  EXPECT_TRUE(contains(deep, "in.json:1:65: ")) << deep;
  EXPECT_TRUE(contains(deep, "nested deeper than 64 levels")) << deep;
  std::string objects;
  for (int i = 0; i < 100000; ++i) objects += "{\"a\":";
  objects += "1" + std::string(100000, '}');
  EXPECT_TRUE(contains(refusal("{\n \"config\": " + objects + "}"), "in.json:2:")) << refusal(objects);
  EXPECT_TRUE(contains(refusal(nested(5), {.max_depth = 4}), "nested deeper than 4 levels (at /0/0/0/0)"));
}

TEST(Json, DuplicateKeysAreRefused) {
  const std::string dup = refusal("{\"a\": {\"b\": 1,\n \"b\": 2}}");
  EXPECT_TRUE(contains(dup, "in.json:2:")) << dup;
  EXPECT_TRUE(contains(dup, "duplicate key 'b' at /a/b")) << dup;
  EXPECT_EQ(refusal("[{\"b\": 1}, {\"b\": 2}]"), "") << "the same key in two objects is no duplicate";
}

TEST(Json, NumbersOutOfRangeAndSyntaxErrorsAreLocated) {
  const std::string big = refusal("{\"median_ns\":\n  1e400}");
  EXPECT_TRUE(contains(big, "in.json:2:")) << big;
  EXPECT_TRUE(contains(big, "1e400")) << big;
  const std::string bad = refusal("{\"a\": tru}");
  EXPECT_TRUE(contains(bad, "in.json:1:")) << bad;
  EXPECT_TRUE(contains(bad, "not valid JSON")) << bad;
  EXPECT_TRUE(contains(refusal(""), "not valid JSON"));
  EXPECT_TRUE(contains(refusal("{\"a\": NaN}"), "not valid JSON"));
  EXPECT_TRUE(contains(refusal(std::string("\"\xff\"")), "not valid JSON")) << "invalid UTF-8";
  EXPECT_TRUE(contains(refusal(std::string(100, ' ') + "1", {.max_bytes = 50}), "101 bytes of JSON, more than the limit of 50"));
}

TEST(Json, ReadingAFileNamesItAndRefusesTooLargeOnesUnread) {
  test::TempDir dir;
  EXPECT_THROW(read_json_file(dir / "missing.json"), IoError);
  try {
    read_json_file(dir.path);
    FAIL() << "a folder is no JSON file";
  } catch (const IoError& e) {
    EXPECT_TRUE(contains(e.what(), dir.path.string())) << e.what();
  }
  std::ofstream(dir / "big.json") << "[" << std::string(2000, ' ') << "]";
  try {
    read_json_file(dir / "big.json", {.max_bytes = 1000});
    FAIL() << "over the limit";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), (dir / "big.json").string() + ": 2002 bytes")) << e.what();
  }
  std::ofstream(dir / "ok.json") << R"({"a": [1, 2]})";
  EXPECT_EQ(read_json_file(dir / "ok.json")["a"][1], 2);
}

TEST(Json, ConfigsAreFlatMapsOfNamesToScalars) {
  EXPECT_EQ(Config::from_json(parse_json(R"({"tile": 8, "algo": "x", "on": true})", "c")).get("on"), 1);
  for (const char* bad : {R"({"tile": {"a": 1}})", R"({"tile": [1]})", R"({"tile": 1.5})", R"({"tile": null})",
                          R"({"tile": 18446744073709551615})", R"({"": 1})", R"({"a b": 1})", R"([1])"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(Config::from_json(parse_json(bad, "c")), InvalidArgument);
  }
  try {
    Config::from_json(parse_json(R"({"tile": 9223372036854775808})", "c"));
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "config parameter 'tile' must be an integer")) << e.what();
  }
}

TEST(Json, WritingIsAtomicAndFailuresLeaveNoTemporaryFile) {
  test::TempDir dir;
  write_json_file(dir / "out.json", {{"a", 1}, {"bad", std::string("\xff")}});
  EXPECT_EQ(read_json_file(dir / "out.json")["a"], 1);
  EXPECT_EQ(read_json_file(dir / "out.json")["bad"], "\xef\xbf\xbd") << "invalid UTF-8 is written as U+FFFD";
  // A folder in the way: rename fails after the temporary file was written.
  fs::create_directories(dir / "taken" / "inside");
  try {
    write_json_file(dir / "taken", {{"a", 1}});
    FAIL() << "a non-empty folder cannot be replaced";
  } catch (const IoError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(contains(what, (dir / "taken").string())) << what;
    EXPECT_FALSE(contains(what, "Success")) << what;
  }
  EXPECT_THROW(write_json_file(dir / "no" / "such" / "folder.json", {}), IoError);
  std::vector<std::string> left;
  for (const auto& f : fs::directory_iterator(dir.path)) left.push_back(f.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"out.json", "taken"}));
}

TEST(Json, PrintableEscapesWhatWouldDriveATerminal) {
  EXPECT_EQ(printable("matmul/m:8 ü €"), "matmul/m:8 ü €");
  EXPECT_EQ(printable("a\x1b[31mb\n\t\r\x7f"), "a\\x1b[31mb\\n\\t\\r\\x7f");
  EXPECT_EQ(printable("\xc2\x9b" "2J"), "\\u009b2J") << "C1 CSI";
  EXPECT_EQ(printable("abc\xe2\x80\xae" "cba"), "abc\\u202ecba") << "bidirectional override";
  EXPECT_EQ(printable("\xff\xc3"), "\\xff\\xc3") << "invalid UTF-8";
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80") << "a surrogate";
  EXPECT_EQ(printable("a\nb", 100, true), "a\nb");
  EXPECT_EQ(printable(std::string(10, 'x'), 4), "xxxx... (6 more bytes)");
}

}  // namespace
}  // namespace ejk
