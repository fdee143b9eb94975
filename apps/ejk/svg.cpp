#include "svg.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/core.h>

#include "ejk/text.hpp"

namespace ejk::app::svg {

std::string escape(std::string_view s) {
  const std::string p = printable(s, 4096);
  std::string out;
  out.reserve(p.size());
  for (char c : p) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string time_text(double ns) {
  if (!(ns > 0)) return "-";
  if (ns < 1e3) return fmt::format("{:.0f} ns", ns);
  if (ns < 1e6) return fmt::format("{:.3g} us", ns / 1e3);
  if (ns < 1e9) return fmt::format("{:.3g} ms", ns / 1e6);
  return fmt::format("{:.3g} s", ns / 1e9);
}

namespace {

// Maps times to heights: logarithmic when they span more than a factor of 20, else linear from 0.
struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  Axis(double min, double max) {
    if (!(min > 0) || !(max > 0)) min = max = 1;
    log = max / min > 20;
    if (log) lo = std::log10(min) - 0.05, hi = std::log10(max) + 0.05;
    else lo = 0, hi = max * 1.08;
    if (!(hi > lo)) hi = lo + 1;
  }
  // 0 at the bottom, 1 at the top.
  double at(double ns) const { return ((log ? std::log10(ns) : ns) - lo) / (hi - lo); }
  std::vector<double> ticks() const {
    std::vector<double> out;
    for (int i = 0; i <= 3; ++i) {
      const double v = lo + (hi - lo) * i / 3.0;
      out.push_back(log ? std::pow(10.0, v) : v);
    }
    if (!log) out.front() = 0;
    return out;
  }
};

bool all_numeric(const std::vector<std::string>& xs, std::map<std::string, double>& value) {
  for (const auto& x : xs) {
    char* end = nullptr;
    const double v = std::strtod(x.c_str(), &end);
    if (x.empty() || end != x.c_str() + x.size()) return false;
    value[x] = v;
  }
  return true;
}

}  // namespace

std::string bars(const std::vector<Bar>& list, std::string_view cls, double full) {
  const int row = 24, label_w = 230, bar_w = 300, text_w = 200;
  const int w = label_w + bar_w + text_w, h = row * static_cast<int>(list.size()) + 8;
  double top = full;
  for (const auto& b : list) top = std::max(top, b.value);
  if (!(top > 0)) top = 1;
  std::string out = fmt::format("<svg class=\"bars {}\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
                                "xmlns=\"http://www.w3.org/2000/svg\">",
                                escape(cls), w, h, w, h);
  for (std::size_t i = 0; i < list.size(); ++i) {
    const auto& b = list[i];
    const int y = 4 + row * static_cast<int>(i);
    const double len = std::max(1.0, bar_w * std::max(0.0, b.value) / top);
    out += fmt::format("<g class=\"bar {}\"><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>"
                       "<rect x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\"/><text x=\"{:.1f}\" y=\"{}\">{}</text>"
                       "<title>{}: {}</title></g>",
                       escape(b.cls), label_w - 6, y + 15, escape(b.label), label_w, y + 3, len, row - 8,
                       label_w + len + 6, y + 15, escape(b.text), escape(b.label), escape(b.text));
  }
  if (full > 0) {
    const double x = label_w + bar_w * full / top;
    out += fmt::format("<line class=\"full\" x1=\"{:.1f}\" y1=\"0\" x2=\"{:.1f}\" y2=\"{}\"/>", x, x, h);
  }
  return out + "</svg>";
}

std::string scatter(std::string_view param, const std::vector<Mark>& marks, bool numeric) {
  const int w = 560, h = 250, left = 72, right = 16, top = 30, bottom = 44, band = 18;
  const int pw = w - left - right, ph = h - top - bottom;
  // The parameter's values, in their order.
  std::vector<std::string> xs;
  for (const auto& m : marks)
    if (std::find(xs.begin(), xs.end(), m.x) == xs.end()) xs.push_back(m.x);
  std::map<std::string, double> value;
  if (numeric && all_numeric(xs, value))
    std::sort(xs.begin(), xs.end(), [&](const std::string& a, const std::string& b) { return value[a] < value[b]; });
  else std::sort(xs.begin(), xs.end());
  double lo = 0, hi = 0;
  for (const auto& m : marks)
    if (m.ok && m.ns > 0) lo = lo > 0 ? std::min(lo, m.ns) : m.ns, hi = std::max(hi, m.ns);
  const Axis axis(lo, hi);
  const double slot = static_cast<double>(pw) / static_cast<double>(std::max<std::size_t>(xs.size(), 1));
  std::string out = fmt::format("<svg class=\"param-plot\" data-param=\"{}\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
                                "xmlns=\"http://www.w3.org/2000/svg\">",
                                escape(param), w, h, w, h);
  // Frame, time ticks, the failure band and the parameter's values.
  out += fmt::format("<rect class=\"frame\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>", left, top, pw, ph);
  out += fmt::format("<text class=\"band\" x=\"{}\" y=\"{}\" text-anchor=\"end\">failed</text>", left - 6, top - band / 2 + 2);
  for (double t : axis.ticks()) {
    if (axis.log && !(t > 0)) continue;
    const double y = top + ph * (1 - axis.at(std::max(t, 1e-300)));
    if (!axis.log && t == 0) {
      out += fmt::format("<text class=\"tick\" x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">0</text>", left - 6, top + ph + 4.0);
      continue;
    }
    out += fmt::format("<line class=\"grid\" x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\"/>", left, y, left + pw, y);
    out += fmt::format("<text class=\"tick\" x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>", left - 6, y + 4,
                       escape(time_text(t)));
  }
  for (std::size_t i = 0; i < xs.size(); ++i)
    out += fmt::format("<text class=\"tick\" x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                       left + slot * (static_cast<double>(i) + 0.5), top + ph + 16, escape(xs[i]));
  out += fmt::format("<text class=\"axis\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>", left + pw / 2, h - 6,
                     escape(param));
  out += fmt::format("<text class=\"axis\" x=\"14\" y=\"{}\" transform=\"rotate(-90 14 {})\" text-anchor=\"middle\">"
                     "median time{}</text>",
                     top + ph / 2, top + ph / 2, axis.log ? " (log)" : "");
  // Marks spread a little sideways within their value's slot so that equal ones stay visible;
  // the winner and the heuristic go last, on top.
  std::map<std::string, int> seen;
  std::vector<const Mark*> order;
  for (const auto& m : marks) order.push_back(&m);
  std::stable_sort(order.begin(), order.end(),
                   [](const Mark* a, const Mark* b) { return (a->winner || a->heuristic) < (b->winner || b->heuristic); });
  for (const Mark* m : order) {
    const std::size_t i = static_cast<std::size_t>(std::find(xs.begin(), xs.end(), m->x) - xs.begin());
    const int k = seen[m->x]++;
    const double spread = std::min(slot * 0.35, 12.0);
    const double x = left + slot * (static_cast<double>(i) + 0.5) + (k % 2 ? 1 : -1) * spread * ((k + 1) / 2 % 4) / 4;
    std::string cls = m->ok ? "marker ok" : "marker failed status-" + m->status;
    if (m->winner) cls += " winner";
    if (m->heuristic) cls += " heuristic";
    std::string shape;
    if (!m->ok) {
      const double y = top - band / 2.0;
      shape = fmt::format("<path d=\"M{:.1f} {:.1f}l8 8m0 -8l-8 8\"/>", x - 4, y - 4);
    } else {
      const double y = top + ph * (1 - axis.at(m->ns));
      if (m->winner) shape = fmt::format("<circle r=\"7\" cx=\"{:.1f}\" cy=\"{:.1f}\"/>", x, y);
      else if (m->heuristic) shape = fmt::format("<path d=\"M{:.1f} {:.1f}l6 6l-6 6l-6 -6z\"/>", x, y - 6);
      else shape = fmt::format("<circle r=\"4\" cx=\"{:.1f}\" cy=\"{:.1f}\"/>", x, y);
    }
    out += fmt::format("<g class=\"{}\">{}<title>{}</title></g>", escape(cls), shape, escape(m->title));
  }
  return out + "</svg>";
}

std::string strips(const std::vector<Series>& series) {
  const int w = 560, row = 28, left = 60, right = 16, top = 8, bottom = 26;
  const int pw = w - left - right, h = top + bottom + row * static_cast<int>(series.size());
  double lo = 0, hi = 0;
  for (const auto& s : series)
    for (double v : s.ns)
      if (v > 0) lo = lo > 0 ? std::min(lo, v) : v, hi = std::max(hi, v);
  if (!(hi > lo)) lo = lo * 0.9, hi = hi * 1.1 + 1;
  const double pad = (hi - lo) * 0.05;
  lo = std::max(0.0, lo - pad), hi += pad;
  auto xof = [&](double v) { return left + pw * (v - lo) / (hi - lo); };
  std::string out = fmt::format("<svg class=\"samples\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
                                "xmlns=\"http://www.w3.org/2000/svg\">",
                                w, h, w, h);
  for (std::size_t i = 0; i < series.size(); ++i) {
    const auto& s = series[i];
    const double y = top + row * (static_cast<double>(i) + 0.5);
    out += fmt::format("<g class=\"series series-{}\"><text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>", i, left - 6,
                       y + 4, escape(s.label));
    for (std::size_t k = 0; k < s.ns.size(); ++k)
      out += fmt::format("<circle class=\"sample\" r=\"2.5\" cx=\"{:.1f}\" cy=\"{:.1f}\"/>", xof(s.ns[k]),
                         y + static_cast<double>(k % 5) * 2 - 4);
    if (!s.ns.empty()) {
      std::vector<double> v = s.ns;
      std::sort(v.begin(), v.end());
      const double med = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
      out += fmt::format("<line class=\"median\" x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\"><title>median {}</title></line>",
                         xof(med), y - 10, xof(med), y + 10, escape(time_text(med)));
    }
    out += "</g>";
  }
  for (int t = 0; t <= 3; ++t) {
    const double v = lo + (hi - lo) * t / 3.0;
    out += fmt::format("<text class=\"tick\" x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>", xof(v), h - 8,
                       escape(time_text(v)));
  }
  return out + "</svg>";
}

}  // namespace ejk::app::svg
