#pragma once
// Runs the real ejk program in a fresh folder with its own cache: the CLI tests' fixture.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <gtest/gtest.h>

namespace ejk {

namespace fs = std::filesystem;

struct Result {
  int code = -1;
  std::string out;  // stdout and stderr together
};

// Runs `cmd` in a shell: its exit code (-1 when it did not exit) and what it printed on stdout
// (and stderr where `cmd` sends it there).
inline Result shell(const std::string& cmd) {
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ejk-cli-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write("tiny.yaml",
          "name: tiny\ndevice: cpu\nworkloads:\n  - kernel: matmul\n    shape: {m: [8, 16], n: 24, k: 32}\n"
          "tune: {strategy: random, budget: {evals: 4}, seed: 3}\n");
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path(name)) << text; }
  std::string read(const std::string& name) const {
    std::ifstream in(path(name));
    return {std::istreambuf_iterator<char>(in), {}};
  }

  // `shell` runs before the program in the same shell (limits, traps).
  Result ejk(const std::string& args, const std::string& shell = "") const {
    return ejk::shell("cd " + dir_.string() + " && " + shell + " EJK_CACHE_DIR=" + path("cache") +
                      " EJK_PROFILE_DIR=" + path("none") + " " EJK_CLI_PATH " " + args + " 2>&1");
  }

  fs::path dir_;
};

}  // namespace ejk
