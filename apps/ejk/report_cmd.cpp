// ejk report RESULT.json... -o report.html: results as one self-contained page.
#include <fmt/core.h>

#include "commands.hpp"
#include "ejk/json.hpp"
#include "ejk/text.hpp"
#include "html_report.hpp"

namespace ejk::app {

void add_report(CLI::App& app, Globals& g) {
  struct Flags {
    std::vector<std::string> results;
    std::string output;
    CompareOptions options;
  };
  auto f = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand(
      "report",
      "write results (ejk run/tune --json, Google Benchmark JSON) as one self-contained HTML page: rates against the "
      "device's ceilings and peers, every tuning candidate, and compare's verdicts against the first file\n"
      "  example: ejk report tune.json -o tune.html\n"
      "  example: ejk report base.json new.json -o report.html");
  cmd->add_option("results", f->results, "result files; the second and later are compared with the first")->required();
  cmd->add_option("-o,--output", f->output, "the HTML file to write")->required();
  cmd->add_option("--alpha", f->options.alpha, "significance level of compare's Mann-Whitney U test, 0 < A < 1")
      ->default_val(0.01);
  cmd->add_option("--min-effect", f->options.min_effect, "smallest relative slowdown compare counts, 0 <= E < 1")
      ->default_val(0.05);
  cmd->callback([f, &g] {
    check(f->options);  // before reading anything
    std::vector<ResultFile> results;
    for (const auto& path : f->results) results.push_back(read_result(path));
    write_text_file(f->output, render_report(results, f->options));
    if (!g.quiet) fmt::print("wrote {}\n", printable(f->output, 4096));
  });
}

}  // namespace ejk::app
