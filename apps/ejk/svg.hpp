#pragma once
// Inline SVG charts for `ejk report`: the page draws them without any script or network, and a
// browser's own tooltips (<title>) name each mark.
#include <string>
#include <string_view>
#include <vector>

namespace ejk::app::svg {

// Text from a file, made printable and safe inside HTML or SVG text and attributes.
std::string escape(std::string_view s);

struct Bar {
  std::string label;  // left of the bar
  double value = 0;   // in the chart's unit; bars scale to the largest (or to `full`)
  std::string text;   // right of the bar
  std::string cls;    // extra CSS class: "self", "peer", "ceiling"
};
// Horizontal bars; `full` > 0 draws a dashed line at that value (100% of a share chart).
std::string bars(const std::vector<Bar>& bars, std::string_view cls, double full = 0);

struct Mark {
  std::string x;     // the parameter's value as text
  double ns = 0;     // median; ignored for failures
  bool ok = true;
  std::string status;  // failure category ("compile", "validation", ...) when !ok
  bool winner = false, heuristic = false;
  std::string title;  // tooltip
};
// Time against one parameter: one mark per candidate, failures in a band above the plot, their
// category in their class and colour. `numeric`: the values are numbers (ordered as such).
std::string scatter(std::string_view param, const std::vector<Mark>& marks, bool numeric);

struct Series {
  std::string label;  // "base", "new"
  std::vector<double> ns;
};
// The samples of each series as dots on a shared time axis, with their medians.
std::string strips(const std::vector<Series>& series);

// "1.23 ms" for nanoseconds.
std::string time_text(double ns);

}  // namespace ejk::app::svg
