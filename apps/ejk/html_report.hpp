#pragma once
// `ejk report`: results of run, tune or Google Benchmark (their --json files) as one
// self-contained HTML page: rates against the device's ceilings and peers, every tuning
// candidate, and compare's verdicts between the files.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compare.hpp"
#include "ejk/ceilings.hpp"

namespace ejk::app {

struct Candidate {
  std::string config;  // canonical
  std::vector<std::pair<std::string, std::string>> params;  // name -> value as text
  std::vector<bool> numeric;                                // per param: a number
  std::string status = "ok";
  double ns = 0;
  std::string message;
};

struct Bench {
  std::string name, status = "ok", error, tier, label;
  double ns = 0, gflops = 0, gbps = 0;
  std::optional<Roofline> roofline;
  std::vector<Candidate> candidates;
  std::optional<std::string> heuristic;  // canonical config
  std::string warm_start;                // the config the search also started from, and its source
  double warm_share = 0;                 // its share of the tune's gain over the heuristic
  double near_best_at = 0;               // evaluations until the first within 5% of the best
};

struct ResultFile {
  std::string path;
  nlohmann::json doc;
  std::string device, date;
  std::optional<Ceilings> ceilings;
  std::vector<Bench> rows;
};

// Reads one result. Throws IoError naming the file when it cannot be read, InvalidArgument
// "<file>: ..." (with the row where there is one) for what it holds.
ResultFile read_result(const std::string& path);

// The page. With two or more results, each after the first is compared with the first.
// Throws InvalidArgument for options outside their ranges.
std::string render_report(const std::vector<ResultFile>& results, const CompareOptions& options);

}  // namespace ejk::app
