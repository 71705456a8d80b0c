// Tiny dependency-free SVG plots for reports: line plots (loss curves), scatter plots (optionally
// with a text label per point: entropy vs accuracy, paper Figure 4; or many small translucent
// points: attention weight vs q·k, Figure 3) and matrix heatmaps with a viridis colormap and a
// colorbar (attention weights, Figure 2). Each function returns a complete standalone SVG document
// as a string (it starts with "<svg"); save_svg writes one atomically.
//
// Non-finite points (and non-positive ones on a log axis) are skipped; a line is broken there.
// Points outside explicit axis limits are clipped to the plot area.
#pragma once
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "train/report/html.h"

namespace hh {

class Tensor;

struct PlotAxis {
  std::string label;
  bool log = false;              // log10 scale
  double min = std::nan("");     // NaN: from the data
  double max = std::nan("");
  bool integer = false;          // ticks on whole numbers only (epochs, layers)
};

struct PlotOptions {
  std::string title;
  PlotAxis x, y;
  int width = 640;
  int height = 440;
  bool legend = true;  // shown when at least one series has a name
  bool grid = true;
};

struct LineSeries {
  std::string name;
  std::vector<double> x, y;  // same length
  std::string color;         // CSS color; empty = the palette color of the series index
  double stroke_width = 1.8;
  bool markers = false;      // a small circle on every point
};

struct ScatterSeries {
  std::string name;
  std::vector<double> x, y;          // same length
  std::vector<std::string> labels;   // empty, or one per point (drawn next to it)
  std::string color;
  double radius = 4.0;
  double opacity = 0.9;
};

struct HeatmapOptions {
  std::string title;
  std::string x_label = "key position";
  std::string y_label = "query position";
  std::vector<std::string> row_labels;  // empty, or one per row (e.g. tokens)
  std::vector<std::string> col_labels;  // empty, or one per column
  double vmin = std::nan("");  // NaN: min / max of the finite values
  double vmax = std::nan("");
  int width = 560;
  int height = 500;
  bool colorbar = true;
};

std::string line_plot(const std::vector<LineSeries>& series, const PlotOptions& options);
std::string scatter_plot(const std::vector<ScatterSeries>& series, const PlotOptions& options);
// values: (rows, cols) row-major; row 0 is drawn at the top. Non-finite cells are drawn grey.
std::string heatmap(const std::vector<double>& values, int64_t rows, int64_t cols, const HeatmapOptions& options);
// m: (rows, cols), any floating dtype, any device.
std::string heatmap(const Tensor& m, const HeatmapOptions& options);

// Writes an SVG (or any text) to `path` atomically (core/atomic_file.h).
void save_svg(const std::string& path, const std::string& svg);

// --- helpers (exposed for tests and for other report code) ---
// Viridis colormap (matplotlib's, interpolated from 11 anchors); t clamped to [0, 1].
std::array<uint8_t, 3> viridis(double t);
std::string rgb_hex(const std::array<uint8_t, 3>& c);  // "#rrggbb"
// The i-th color of the default 10-color palette.
std::string palette_color(size_t i);
// About `target` round tick values (1, 2, 5 x 10^k steps) inside [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int target = 6);
// xml_escape (escaping text for SVG and HTML) is in train/report/html.h.

}  // namespace hh
