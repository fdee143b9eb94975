// ejk compare BASE.json NEW.json: the CI performance check.
#include <fmt/core.h>

#include "commands.hpp"
#include "compare.hpp"
#include "ejk/error.hpp"
#include "ejk/json.hpp"
#include "ejk/text.hpp"

namespace ejk::app {

void add_compare(CLI::App& app, Globals& g) {
  struct Flags {
    std::string base, next;
    CompareOptions options;
    bool allow_missing = false;
  };
  auto f = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand(
      "compare",
      "compare two results (ejk --json or Google Benchmark JSON); exit 1 on a significant slowdown\n"
      "  example: ejk compare baseline.json new.json --min-effect 0.05 --alpha 0.01");
  cmd->add_option("base", f->base, "baseline result")->required();
  cmd->add_option("new", f->next, "new result")->required();
  cmd->add_option("--alpha", f->options.alpha, "significance level of the Mann-Whitney U test, 0 < A < 1")
      ->default_val(0.01);
  cmd->add_option("--min-effect", f->options.min_effect,
                  "smallest relative slowdown that counts, a fraction 0 <= E < 1 (0.05 = 5%)")
      ->default_val(0.05);
  cmd->add_flag("--allow-missing", f->allow_missing,
                "compare what both have even when benchmarks of BASE are missing from NEW or failed there");
  cmd->callback([f, &g] {
    check(f->options);  // before reading anything
    const CompareResult r = compare(read_json_file(f->base), read_json_file(f->next), f->options, f->base, f->next);
    std::size_t w = 9;
    std::vector<std::string> names;
    for (const auto& c : r.rows) {
      names.push_back(printable(c.name, 120));
      w = std::max(w, names.back().size());
    }
    if (!g.quiet) {
      fmt::print("{:<{}}  {:>12}  {:>12}  {:>8}  {:>9}  {}\n", "benchmark", w, "base", "new", "change", "p", "verdict");
      for (std::size_t i = 0; i < r.rows.size(); ++i) {
        const auto& c = r.rows[i];
        if (c.verdict == Comparison::Verdict::missing) {
          fmt::print("{:<{}}  {}\n", names[i], w, printable(c.note, 200));
          continue;
        }
        const char* verdict = verdict_text(c.verdict);
        fmt::print("{:<{}}  {:>9.2f} us  {:>9.2f} us  {:>+7.1f}%  {:>9.2g}  {}\n", names[i], w, c.base_ns / 1e3,
                   c.new_ns / 1e3, 100 * c.change, c.p_value, verdict);
      }
      fmt::print("geomean change {:+.1f}%, {} regression(s) (alpha {}, min effect {:.0f}%)\n", 100 * r.geomean_change,
                 r.regressions, f->options.alpha, 100 * f->options.min_effect);
    }
    // Benchmarks that vanished (renamed, failed, an empty file) are no evidence of speed: a
    // check that passes must have compared them.
    if (r.missing > 0 && !f->allow_missing)
      throw InvalidArgument(fmt::format("{} of {} benchmarks of {} have no samples in {} (listed above); "
                                        "--allow-missing compares the rest",
                                        r.missing, r.rows.size(), printable(f->base, 4096), printable(f->next, 4096)));
    bool any = false;
    for (const auto& c : r.rows) any = any || c.verdict != Comparison::Verdict::missing;
    if (!any)
      throw InvalidArgument(fmt::format("{} and {} have no benchmark with samples in common: nothing was compared",
                                        printable(f->base, 4096), printable(f->next, 4096)));
    g.exit_code = r.regressions ? 1 : 0;
  });
}

}  // namespace ejk::app
