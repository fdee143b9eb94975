// ejk compare BASE.json NEW.json: the CI performance check.
#include <fstream>

#include <fmt/core.h>

#include "commands.hpp"
#include "compare.hpp"
#include "ejk/error.hpp"

namespace ejk::app {

namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw IoError("cannot read " + path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw InvalidArgument(path + ": not JSON: " + e.what());
  }
}

}  // namespace

void add_compare(CLI::App& app, Globals& g) {
  struct Flags {
    std::string base, next;
    CompareOptions options;
  };
  auto f = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand(
      "compare",
      "compare two results (ejk --json or Google Benchmark JSON); exit 1 on a significant slowdown\n"
      "  example: ejk compare baseline.json new.json --min-effect 0.05 --alpha 0.01");
  cmd->add_option("base", f->base, "baseline result")->required()->check(CLI::ExistingFile);
  cmd->add_option("new", f->next, "new result")->required()->check(CLI::ExistingFile);
  cmd->add_option("--alpha", f->options.alpha, "significance level of the Mann-Whitney U test")->default_val(0.01);
  cmd->add_option("--min-effect", f->options.min_effect, "smallest relative slowdown that counts")->default_val(0.05);
  cmd->callback([f, &g] {
    CompareResult r;
    try {
      r = compare(read_json(f->base), read_json(f->next), f->options);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(std::string(e.what()) + " (comparing " + f->base + " and " + f->next + ")");
    }
    std::size_t w = 9;
    for (const auto& c : r.rows) w = std::max(w, c.name.size());
    if (!g.quiet) {
      fmt::print("{:<{}}  {:>12}  {:>12}  {:>8}  {:>9}  {}\n", "benchmark", w, "base", "new", "change", "p", "verdict");
      for (const auto& c : r.rows) {
        const char* verdict = c.verdict == Comparison::Verdict::slower   ? "REGRESSION"
                              : c.verdict == Comparison::Verdict::faster ? "faster"
                              : c.verdict == Comparison::Verdict::missing ? "missing in new"
                                                                          : "same";
        if (c.verdict == Comparison::Verdict::missing) {
          fmt::print("{:<{}}  {}\n", c.name, w, verdict);
          continue;
        }
        fmt::print("{:<{}}  {:>9.2f} us  {:>9.2f} us  {:>+7.1f}%  {:>9.2g}  {}\n", c.name, w, c.base_ns / 1e3,
                   c.new_ns / 1e3, 100 * c.change, c.p_value, verdict);
      }
      fmt::print("geomean change {:+.1f}%, {} regression(s) (alpha {}, min effect {:.0f}%)\n", 100 * r.geomean_change,
                 r.regressions, f->options.alpha, 100 * f->options.min_effect);
    }
    g.exit_code = r.regressions ? 1 : 0;
  });
}

}  // namespace ejk::app
