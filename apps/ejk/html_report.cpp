#include "html_report.hpp"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>
#include <set>

#include <fmt/core.h>

#include "ejk/config.hpp"
#include "ejk/error.hpp"
#include "ejk/json.hpp"
#include "ejk/measurement.hpp"
#include "ejk/text.hpp"
#include "report.hpp"
#include "svg.hpp"

namespace ejk::app {

using svg::escape;

namespace {

// ---- reading -------------------------------------------------------------------------------

struct Reader {
  const nlohmann::json& row;
  std::string where;
  InvalidArgument refuse(const std::string& what) const { return InvalidArgument(where + ": " + what); }
  std::string text(const char* key, const std::string& fallback = "") const {
    if (!row.contains(key)) return fallback;
    if (!row.at(key).is_string()) throw refuse(std::string("'") + key + "' must be a string, got " + json_kind(row.at(key)));
    return row.at(key).get<std::string>();
  }
  // A non-negative finite number, 0 when absent.
  double number(const char* key) const {
    if (!row.contains(key)) return 0;
    const auto& v = row.at(key);
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
      throw refuse(std::string("'") + key + "' must be a non-negative number, got " + json_kind(v));
    return v.get<double>();
  }
};

Candidate candidate_of(const nlohmann::json& c, const std::string& where) {
  Reader r{c, where};
  if (!c.is_object()) throw r.refuse("a candidate is an object, got " + json_kind(c));
  if (!c.contains("config")) throw r.refuse("a candidate has no 'config'");
  Candidate out;
  try {
    out.config = Config::from_json(c.at("config")).canonical();
  } catch (const InvalidArgument& e) {
    throw r.refuse(e.what());
  }
  for (const auto& [k, v] : c.at("config").items()) {
    out.params.emplace_back(k, v.is_string() ? v.get<std::string>() : v.dump());
    out.numeric.push_back(!v.is_string());
  }
  out.status = r.text("status", "ok");
  try {
    (void)parse_status(out.status);
  } catch (const InvalidArgument& e) {
    throw r.refuse(e.what());
  }
  out.ns = r.number("median_ns");
  if (out.status == "ok" && !(out.ns > 0)) throw r.refuse("a candidate that ran needs a positive 'median_ns'");
  out.message = r.text("message");
  return out;
}

std::optional<Roofline> roofline_of(const Reader& r) {
  if (!r.row.contains("roofline")) return std::nullopt;
  const auto& j = r.row.at("roofline");
  Reader rr{j, r.where + ": roofline"};
  if (!j.is_object()) throw rr.refuse("must be an object, got " + json_kind(j));
  Roofline out;
  out.share = rr.number("share");
  const std::string bound = rr.text("bound");
  if (bound != "compute" && bound != "memory") throw rr.refuse("'bound' must be \"compute\" or \"memory\"");
  out.compute_bound = bound == "compute";
  out.intensity = rr.number("intensity");
  out.attainable = rr.number(out.compute_bound ? "attainable_GFLOP/s" : "attainable_GB/s") * 1e9;
  return out;
}

Bench bench_of(const nlohmann::json& row, const std::string& where) {
  Reader r{row, where};
  Bench b;
  b.name = r.text("run_name");
  if (b.name.empty()) b.name = r.text("name");
  r.where += " (" + printable(b.name, 120) + ")";
  b.status = r.text("status", "ok");
  if (row.contains("error_occurred") && row.at("error_occurred").is_boolean() && row.at("error_occurred").get<bool>()) {
    if (b.status == "ok") b.status = "failed";
    b.error = r.text("error_message", "failed");
  }
  b.tier = r.text("tier");
  b.label = r.text("label");
  const std::string unit = r.text("time_unit", "ns");
  const double scale = unit == "ns" ? 1 : unit == "us" ? 1e3 : unit == "ms" ? 1e6 : unit == "s" ? 1e9 : 0;
  if (scale == 0) throw r.refuse("unknown time_unit '" + printable(unit, 40) + "' (ns, us, ms or s)");
  b.ns = r.number("real_time") * scale;
  // ejk writes GFLOP/s and GB/s; Google Benchmark programs often count in the larger units.
  b.gflops = row.contains("GFLOP/s") ? r.number("GFLOP/s") : 1e3 * r.number("TFLOP/s");
  b.gbps = row.contains("GB/s") ? r.number("GB/s") : 1e3 * r.number("TB/s");
  b.roofline = roofline_of(r);
  if (row.contains("candidates")) {
    const auto& list = row.at("candidates");
    if (!list.is_array()) throw r.refuse("'candidates' must be an array, got " + json_kind(list));
    for (std::size_t i = 0; i < list.size(); ++i)
      b.candidates.push_back(candidate_of(list[i], r.where + ": candidates[" + std::to_string(i) + "]"));
  }
  b.warm_start = r.text("warm_start");
  b.warm_share = r.number("warm_share");
  b.near_best_at = r.number("evaluations_to_near_best");
  if (row.contains("heuristic")) {
    try {
      b.heuristic = Config::from_json(row.at("heuristic")).canonical();
    } catch (const InvalidArgument& e) {
      throw r.refuse(std::string("'heuristic': ") + e.what());
    }
  }
  return b;
}

// ---- what the page says --------------------------------------------------------------------

bool is_peer(const std::string& name) {
  std::size_t start = 0;
  while (start <= name.size()) {
    const std::size_t end = std::min(name.find('/', start), name.size());
    if (name.substr(start, end - start).find("peer") != std::string::npos) return true;
    start = end + 1;
  }
  return false;
}

// The part of a peer's name before its peer component: the rows it stands beside share it.
std::string peer_prefix(const std::string& name) {
  std::size_t start = 0;
  while (start < name.size()) {
    const std::size_t end = std::min(name.find('/', start), name.size());
    if (name.substr(start, end - start).find("peer") != std::string::npos) return name.substr(0, start);
    start = end + 1;
  }
  return name;
}

// The workload's dtype, from the last component of its name that is one (ejk's names end in it).
DType dtype_of(const std::string& name) {
  DType t = DType::f32;
  std::size_t start = 0;
  while (start <= name.size()) {
    const std::size_t end = std::min(name.find('/', start), name.size());
    const std::string part = name.substr(start, end - start);
    if (part == "f32" || part == "f16" || part == "bf16" || part == "i32") t = parse_dtype(part);
    start = end + 1;
  }
  return t;
}

// "812.3 GFLOP/s" (report.hpp), for the rates the page shows.
std::string rate_text(double per_second, const char* unit) { return human_rate(per_second, unit); }

std::string ceilings_text(const Ceilings& c) {
  std::string s;
  if (c.copy) s = "copy " + rate_text(c.copy->per_second, "B/s");
  for (const auto& [t, f] : c.matmul)
    s += (s.empty() ? "" : "; ") + std::string("matmul ") + std::string(to_string(t)) + " " + rate_text(f.per_second, "FLOP/s");
  return s;
}

std::string ceilings_chart(const Bench& b, const Ceilings* c) {
  std::vector<svg::Bar> list;
  if (b.roofline) list.push_back({"roofline", 100 * b.roofline->share, b.roofline->describe(), "self"});
  if (c) {
    const DType t = dtype_of(b.name);
    if (const double peak = c->peak_flops(t); peak > 0 && b.gflops > 0)
      list.push_back({fmt::format("FLOP/s of the {} matmul peak", to_string(c->matmul.count(t) ? t : DType::f32)),
                      100 * b.gflops * 1e9 / peak,
                      fmt::format("{:.0f}% ({} of {})", 100 * b.gflops * 1e9 / peak, rate_text(b.gflops * 1e9, "FLOP/s"),
                                  rate_text(peak, "FLOP/s")),
                      "ceiling"});
    if (const double bw = c->bandwidth(); bw > 0 && b.gbps > 0)
      list.push_back({"B/s of the copy bandwidth", 100 * b.gbps * 1e9 / bw,
                      fmt::format("{:.0f}% ({} of {})", 100 * b.gbps * 1e9 / bw, rate_text(b.gbps * 1e9, "B/s"),
                                  rate_text(bw, "B/s")),
                      "ceiling"});
  }
  if (list.empty()) return "";
  return "<h4>Against the device's ceilings</h4>" + svg::bars(list, "ceilings", 100);
}

std::string peers_chart(const Bench& b, const std::vector<const Bench*>& peers) {
  if (peers.empty() || b.status != "ok") return "";
  // One unit for all: FLOP/s where every row counts them, else bytes/s, else time.
  bool flops = b.gflops > 0, bytes = b.gbps > 0;
  for (const Bench* p : peers) flops = flops && p->gflops > 0, bytes = bytes && p->gbps > 0;
  auto value = [&](const Bench& x) { return flops ? x.gflops * 1e9 : bytes ? x.gbps * 1e9 : x.ns; };
  auto shown = [&](const Bench& x) {
    return flops ? rate_text(x.gflops * 1e9, "FLOP/s") : bytes ? rate_text(x.gbps * 1e9, "B/s") : svg::time_text(x.ns);
  };
  std::vector<svg::Bar> list{{"this workload", value(b), shown(b), "self"}};
  for (const Bench* p : peers) {
    if (!(p->ns > 0)) continue;
    const double ratio = p->ns / b.ns;  // > 1: this workload is faster than the peer
    // The peer's own part of its name: what it shares with the workload says nothing.
    const std::string own = p->name.substr(peer_prefix(p->name).size());
    list.push_back({own.size() > 34 ? own.substr(0, 33) + "..." : own, value(*p),
                    fmt::format("{}  ({:.2f}x)", shown(*p), ratio), "peer"});
  }
  return fmt::format("<h4>Against its peers ({}; the ratio is the peer's time over this one's)</h4>",
                     flops ? "FLOP/s" : bytes ? "bytes/s" : "median time") +
         svg::bars(list, "peers");
}

std::string candidates_section(const Bench& b) {
  if (b.candidates.empty()) return "";
  std::map<std::string, int> failed;
  for (const auto& c : b.candidates)
    if (c.status != "ok") ++failed[c.status];
  std::string categories;
  for (const auto& [k, n] : failed) categories += fmt::format("{}{} {}", categories.empty() ? "" : ", ", escape(k), n);
  std::string out = fmt::format("<h4>Candidates</h4><p class=\"candidates-summary\"><span class=\"count\">{}</span> "
                                "candidates measured, {} failed{}.</p>",
                                b.candidates.size(), b.candidates.size() - static_cast<std::size_t>([&] {
                                  int n = 0;
                                  for (const auto& c : b.candidates) n += c.status == "ok";
                                  return n;
                                }()),
                                categories.empty() ? "" : " (" + categories + ")");
  out += fmt::format("<p class=\"winner-config\">winner: <code>{}</code></p>", escape(b.label));
  if (b.heuristic) out += fmt::format("<p class=\"heuristic-config\">heuristic: <code>{}</code></p>", escape(*b.heuristic));
  if (!b.warm_start.empty())
    out += fmt::format("<p class=\"warm-start\">warm start: <code>{}</code>{}</p>", escape(b.warm_start),
                       b.warm_share > 0 ? fmt::format(", {:.0f}% of the gain over the heuristic", 100 * b.warm_share) : "");
  if (b.near_best_at > 0)
    out += fmt::format("<p class=\"near-best\">within 5% of the best after {:.0f} evaluations</p>", b.near_best_at);
  // One plot per parameter, in the order of the first candidate's config.
  std::vector<std::string> params;
  std::map<std::string, bool> numeric;
  for (const auto& c : b.candidates)
    for (std::size_t i = 0; i < c.params.size(); ++i) {
      if (!numeric.count(c.params[i].first)) params.push_back(c.params[i].first), numeric[c.params[i].first] = true;
      numeric[c.params[i].first] = numeric[c.params[i].first] && c.numeric[i];
    }
  out += "<div class=\"plots\">";
  for (const auto& p : params) {
    std::vector<svg::Mark> marks;
    for (const auto& c : b.candidates) {
      svg::Mark m;
      m.x = "-";
      for (const auto& [k, v] : c.params)
        if (k == p) m.x = v;
      m.ok = c.status == "ok";
      m.ns = c.ns;
      m.status = c.status;
      m.winner = m.ok && c.config == b.label;
      m.heuristic = b.heuristic && c.config == *b.heuristic;
      m.title = c.config + (m.ok ? "  " + svg::time_text(c.ns) : "  " + c.status + ": " + c.message) +
                (m.winner ? "  (winner)" : "") + (m.heuristic ? "  (heuristic)" : "");
      marks.push_back(std::move(m));
    }
    out += svg::scatter(p, marks, numeric[p]);
  }
  out += "</div><p class=\"legend\"><svg width=\"420\" height=\"20\" xmlns=\"http://www.w3.org/2000/svg\">"
         "<g class=\"marker ok\"><circle r=\"4\" cx=\"8\" cy=\"10\"/></g><text x=\"18\" y=\"14\">candidate</text>"
         "<g class=\"marker ok winner\"><circle r=\"7\" cx=\"100\" cy=\"10\"/></g><text x=\"112\" y=\"14\">winner</text>"
         "<g class=\"marker ok heuristic\"><path d=\"M180 4l6 6l-6 6l-6 -6z\"/></g><text x=\"192\" y=\"14\">heuristic</text>"
         "<g class=\"marker failed\"><path d=\"M260 6l8 8m0 -8l-8 8\"/></g><text x=\"274\" y=\"14\">failed (by category)</text>"
         "</svg></p>";
  // The same as a table, slowest last, failures after.
  std::vector<const Candidate*> sorted;
  for (const auto& c : b.candidates) sorted.push_back(&c);
  std::stable_sort(sorted.begin(), sorted.end(), [](const Candidate* x, const Candidate* y) {
    if ((x->status == "ok") != (y->status == "ok")) return x->status == "ok";
    return x->ns < y->ns;
  });
  out += "<details><summary>every candidate</summary><table class=\"candidates\"><tr><th>config</th><th>median</th>"
         "<th>status</th></tr>";
  for (const Candidate* c : sorted) {
    std::string cls = c->status == "ok" ? "ok" : "failed";
    if (c->config == b.label && c->status == "ok") cls += " winner";
    if (b.heuristic && c->config == *b.heuristic) cls += " heuristic";
    out += fmt::format("<tr class=\"{}\"><td><code>{}</code></td><td>{}</td><td>{}</td></tr>", cls, escape(c->config),
                       c->status == "ok" ? svg::time_text(c->ns) : "-",
                       c->status == "ok" ? "ok" : escape(c->status + ": " + c->message));
  }
  return out + "</table></details>";
}

std::string result_section(const ResultFile& r, std::size_t index) {
  std::string out = fmt::format("<section class=\"result\" id=\"result-{}\"><h2>{}</h2>", index, escape(r.path));
  out += fmt::format("<p class=\"context\">{}{}</p>", r.device.empty() ? "device not named" : "device " + escape(r.device),
                     r.date.empty() ? "" : ", " + escape(r.date));
  const Ceilings* ceilings = r.ceilings ? &*r.ceilings : nullptr;
  if (ceilings) out += fmt::format("<p class=\"ceilings\">Device ceilings: {}</p>", escape(ceilings_text(*ceilings)));
  std::vector<const Bench*> peers;
  for (const auto& b : r.rows)
    if (is_peer(b.name)) peers.push_back(&b);
  out += "<table class=\"summary\"><tr><th>workload</th><th>median</th><th>FLOP/s</th><th>B/s</th><th>roofline</th>"
         "<th>tier</th><th>config</th></tr>";
  for (const auto& b : r.rows)
    out += fmt::format("<tr class=\"{}\"><td class=\"name\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"config\"><code>{}</code></td></tr>",
                       b.status == "ok" ? "ok" : "failed", escape(b.name),
                       b.status == "ok" ? svg::time_text(b.ns) : escape(b.status), rate_text(b.gflops * 1e9, "FLOP/s"),
                       rate_text(b.gbps * 1e9, "B/s"), b.roofline ? escape(b.roofline->describe()) : "-", escape(b.tier),
                       escape(b.label));
  out += "</table>";
  for (const auto& b : r.rows) {
    if (is_peer(b.name)) continue;
    out += fmt::format("<div class=\"workload\" data-name=\"{}\"><h3>{}</h3>", escape(b.name), escape(b.name));
    if (b.status != "ok") out += fmt::format("<p class=\"failure\">{}: {}</p>", escape(b.status), escape(b.error));
    else
      out += fmt::format("<p class=\"rates\">median {}{}{}</p>", svg::time_text(b.ns),
                         b.gflops > 0 ? ", " + rate_text(b.gflops * 1e9, "FLOP/s") : "",
                         b.gbps > 0 ? ", " + rate_text(b.gbps * 1e9, "B/s") : "");
    if (b.status == "ok") out += ceilings_chart(b, ceilings);
    std::vector<const Bench*> mine;
    for (const Bench* p : peers)
      if (b.name.starts_with(peer_prefix(p->name))) mine.push_back(p);
    out += peers_chart(b, mine);
    out += candidates_section(b);
    out += "</div>";
  }
  return out + "</section>";
}

std::string compare_section(const ResultFile& base, const ResultFile& next, const CompareOptions& options) {
  CompareResult cr;
  try {
    cr = compare(base.doc, next.doc, options, base.path, next.path);
  } catch (const InvalidArgument& e) {
    // Both files were read whole already: what is left is a base with nothing to compare.
    return fmt::format("<section class=\"compare\"><h2>{} against {}</h2><p class=\"compare-summary\">{}</p></section>",
                       escape(next.path), escape(base.path), escape(e.what()));
  }
  std::map<std::string, std::vector<double>> base_samples, next_samples;
  for (auto& s : samples_by_name(base.doc, base.path)) base_samples[s.name] = std::move(s.ns);
  for (auto& s : samples_by_name(next.doc, next.path)) next_samples[s.name] = std::move(s.ns);
  std::string out = fmt::format("<section class=\"compare\"><h2>{} against {}</h2>", escape(next.path), escape(base.path));
  out += fmt::format("<p class=\"compare-summary\">geomean change {:+.1f}%, {} regression(s) (alpha {}, min effect {:.0f}%)</p>",
                     100 * cr.geomean_change, cr.regressions, options.alpha, 100 * options.min_effect);
  for (const auto& c : cr.rows) {
    const std::string verdict = verdict_text(c.verdict);
    out += fmt::format("<div class=\"comparison verdict-{}\" data-name=\"{}\"><h3>{}</h3>", escape(verdict), escape(c.name),
                       escape(c.name));
    if (c.verdict == Comparison::Verdict::missing) {
      out += fmt::format("<p class=\"verdict\">{}: {}</p></div>", escape(verdict), escape(c.note));
      continue;
    }
    out += fmt::format("<p class=\"verdict\"><b>{}</b>: {} to {} ({:+.1f}%, p = {:.2g}, {} and {} samples)</p>",
                       escape(verdict), svg::time_text(c.base_ns), svg::time_text(c.new_ns), 100 * c.change, c.p_value,
                       c.base_n, c.new_n);
    out += svg::strips({{"base", base_samples[c.name]}, {"new", next_samples[c.name]}});
    out += "</div>";
  }
  return out + "</section>";
}

constexpr const char* style = R"css(
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;max-width:1200px}
h1{font-size:1.5em}h2{font-size:1.25em;border-bottom:1px solid #ccc;margin-top:2em}h3{font-size:1.05em;margin-bottom:.3em}
h4{font-size:.95em;margin:.8em 0 .2em;color:#444}
table{border-collapse:collapse;font-size:.85em}td,th{border:1px solid #ddd;padding:2px 6px;text-align:left;white-space:nowrap}
table.summary{width:100%}td.name,td.config{white-space:normal;overflow-wrap:anywhere;min-width:16em}
tr.failed td{color:#a00}tr.winner td{background:#fff3c4;font-weight:bold}tr.heuristic td{background:#e3f0ff}
code{font-size:.9em}.workload,.comparison{margin:1em 0 1.5em}
svg text{font-size:11px;fill:#333}.frame{fill:none;stroke:#999}.grid{stroke:#eee}.full{stroke:#555;stroke-dasharray:4 3}
.bar rect{fill:#7a9cc6}.bar.self rect{fill:#2b6cb0}.bar.peer rect{fill:#aaa}.bar.ceiling rect{fill:#68a868}
.marker.ok circle,.marker.ok path{fill:#4a7ab8;fill-opacity:.75}
.marker.winner circle{fill:#f0b400;stroke:#7a5a00;stroke-width:2;fill-opacity:1}
.marker.heuristic path,.marker.heuristic circle{fill:#fff;stroke:#c00;stroke-width:2;fill-opacity:1}
.marker.winner.heuristic circle{fill:#f0b400;stroke:#c00}
.marker.failed path{stroke:#c00;stroke-width:2;fill:none}
.marker.status-compile path{stroke:#8b008b}.marker.status-validation path{stroke:#d2691e}
.marker.status-device_limits path{stroke:#555}.marker.status-timeout path{stroke:#b8860b}
.plots{display:flex;flex-wrap:wrap;gap:8px}.sample{fill:#4a7ab8;fill-opacity:.6}.series-1 .sample{fill:#d2691e}
.median{stroke:#000;stroke-width:2}.verdict-REGRESSION .verdict b{color:#c00}.verdict-faster .verdict b{color:#080}
)css";

}  // namespace

ResultFile read_result(const std::string& path) {
  ResultFile r;
  r.path = path;
  r.doc = read_json_file(path);
  const std::string src = printable(path, 4096);
  // The rows' shape as compare reads them: the same refusals, the same messages.
  (void)samples_by_name(r.doc, path);
  if (r.doc.contains("context")) {
    const auto& ctx = r.doc.at("context");
    if (!ctx.is_object()) throw InvalidArgument(src + ": 'context' must be an object, got " + json_kind(ctx));
    if (ctx.contains("date") && ctx.at("date").is_string()) r.date = ctx.at("date").get<std::string>();
    if (ctx.contains("device") && ctx.at("device").is_object()) {
      const auto& d = ctx.at("device");
      std::string name = d.contains("name") && d.at("name").is_string() ? d.at("name").get<std::string>() : "";
      std::string id = d.contains("id") && d.at("id").is_string() ? d.at("id").get<std::string>() : "";
      r.device = id.empty() ? name : name.empty() ? id : id + " (" + name + ")";
    }
    if (ctx.contains("ceilings")) {
      try {
        r.ceilings = Ceilings::from_json(ctx.at("ceilings"));
      } catch (const InvalidArgument& e) {
        throw InvalidArgument(src + ": context: " + e.what());
      }
    }
  }
  const auto& rows = r.doc.at("benchmarks");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    Reader rd{rows[i], src + ": benchmarks[" + std::to_string(i) + "]"};
    if (rd.text("run_type", "iteration") == "aggregate") continue;
    r.rows.push_back(bench_of(rows[i], rd.where));
  }
  return r;
}

std::string render_report(const std::vector<ResultFile>& results, const CompareOptions& options) {
  check(options);
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M UTC", &tm);
  // The verdicts first: with several files they are what the page is read for.
  std::string body;
  for (std::size_t i = 1; i < results.size(); ++i) body += compare_section(results[0], results[i], options);
  for (std::size_t i = 0; i < results.size(); ++i) body += result_section(results[i], i);
  std::string files;
  for (const auto& r : results) files += (files.empty() ? "" : ", ") + escape(r.path);
  return fmt::format("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>ejk report</title>"
                     "<style>{}</style></head><body><h1>ejk report</h1><p class=\"files\">{} ({})</p>{}</body></html>\n",
                     style, files, stamp, body);
}

}  // namespace ejk::app
