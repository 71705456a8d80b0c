// Dependency-free SVG plots: line, scatter, heatmap (see train/report/svg.h).
#include "train/report/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/tensor.h"

namespace hh {

namespace {

// matplotlib viridis sampled at t = 0, 0.1, ..., 1.
constexpr uint8_t kViridis[11][3] = {{68, 1, 84},    {72, 36, 117},  {65, 68, 135},  {53, 95, 141},
                                     {42, 120, 142}, {33, 145, 140}, {34, 168, 132}, {68, 191, 112},
                                     {122, 209, 81}, {189, 223, 38}, {253, 231, 37}};

constexpr const char* kPalette[10] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

constexpr double kFontPx = 12.0;
constexpr double kCharPx = 6.6;  // rough width of one character at kFontPx

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// Tick label: as many decimals as the step needs, %g for very large or small magnitudes.
std::string tick_label(double v, double step, bool log_axis) {
  char buf[32];
  if (std::fabs(v) < 1e-12 * std::max(1.0, std::fabs(step))) return "0";
  if (log_axis || std::fabs(v) >= 1e5 || std::fabs(v) < 1e-3) {
    std::snprintf(buf, sizeof buf, "%g", v);
  } else {
    int decimals = step >= 1.0 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
    std::snprintf(buf, sizeof buf, "%.*f", std::clamp(decimals, 0, 10), v);
  }
  return buf;
}

bool usable(double v, bool log_axis) { return std::isfinite(v) && (!log_axis || v > 0.0); }

struct Range {
  double lo, hi;
};

// Data range of `values` on an axis, widened when degenerate and padded by `pad` of the span
// (in the axis' own scale); explicit limits win.
Range axis_range(const std::vector<const std::vector<double>*>& values, const PlotAxis& axis, double pad) {
  double lo = INFINITY, hi = -INFINITY;
  for (const auto* vs : values)
    for (double v : *vs)
      if (usable(v, axis.log)) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
  if (!(lo <= hi)) {
    lo = axis.log ? 0.1 : 0.0;
    hi = axis.log ? 10.0 : 1.0;
  }
  if (axis.log) {
    double a = std::log10(lo), b = std::log10(hi);
    if (b - a < 1e-12) {
      a -= 0.5;
      b += 0.5;
    }
    const double p = (b - a) * pad;
    lo = std::pow(10.0, a - p);
    hi = std::pow(10.0, b + p);
  } else {
    if (hi - lo < 1e-12 * std::max(1.0, std::fabs(hi))) {
      const double w = std::max(0.5, std::fabs(hi) * 0.05);
      lo -= w;
      hi += w;
    }
    const double p = (hi - lo) * pad;
    lo -= p;
    hi += p;
  }
  if (std::isfinite(axis.min)) lo = axis.min;
  if (std::isfinite(axis.max)) hi = axis.max;
  HH_CHECK(hi > lo, "plot: axis '", axis.label, "' has an empty range [", lo, ", ", hi, "]");
  HH_CHECK(!axis.log || lo > 0.0, "plot: log axis '", axis.label, "' needs positive limits, got [", lo, ", ", hi, "]");
  return {lo, hi};
}

std::vector<double> log_ticks(double lo, double hi) {
  std::vector<double> t;
  for (int d = static_cast<int>(std::ceil(std::log10(lo) - 1e-9)); d <= static_cast<int>(std::floor(std::log10(hi) + 1e-9)); ++d)
    t.push_back(std::pow(10.0, d));
  if (t.size() >= 2) return t;
  t.clear();
  for (int d = static_cast<int>(std::floor(std::log10(lo))); d <= static_cast<int>(std::ceil(std::log10(hi))); ++d)
    for (double m : {1.0, 2.0, 5.0}) {
      const double v = m * std::pow(10.0, d);
      if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) t.push_back(v);
    }
  return t.size() >= 2 ? t : nice_ticks(lo, hi);
}

// Maps data coordinates to pixels inside the plot area.
struct Frame {
  double left, top, width, height;
  Range xr, yr;
  bool xlog, ylog;
  static double scale(double v, bool log_axis) { return log_axis ? std::log10(v) : v; }
  double px(double x) const {
    const double a = scale(xr.lo, xlog), b = scale(xr.hi, xlog);
    return left + (scale(x, xlog) - a) / (b - a) * width;
  }
  double py(double y) const {
    const double a = scale(yr.lo, ylog), b = scale(yr.hi, ylog);
    return top + height - (scale(y, ylog) - a) / (b - a) * height;
  }
};

void open_svg(std::string& s, int w, int h) {
  HH_CHECK(w >= 100 && h >= 100 && w <= 20000 && h <= 20000, "plot: size ", w, "x", h, " outside [100, 20000]");
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(w) + "\" height=\"" + std::to_string(h) +
       "\" viewBox=\"0 0 " + std::to_string(w) + " " + std::to_string(h) +
       "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"" + num(kFontPx) + "\">\n";
  s += "<rect x=\"0\" y=\"0\" width=\"" + std::to_string(w) + "\" height=\"" + std::to_string(h) + "\" fill=\"white\"/>\n";
}

void text(std::string& s, double x, double y, const std::string& body, const char* anchor, const std::string& extra = "") {
  s += "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" text-anchor=\"" + anchor + "\"" + extra + ">" + xml_escape(body) +
       "</text>\n";
}

// The title, bold, centred; a title too long for the figure is set smaller (down to 10 px) and,
// if still too long, on two lines split at a space, so no part of it falls outside the figure.
// Width is estimated at 0.6 em per character (bold Helvetica averages below that).
void title(std::string& s, int w, const std::string& t) {
  if (t.empty()) return;
  size_t chars = 0;
  for (unsigned char c : t) chars += (c & 0xC0) != 0x80;  // code points
  const auto fit = [&](size_t n) { return (w - 16.0) / (0.6 * static_cast<double>(std::max<size_t>(n, 1))); };
  const auto line = [&](double y, const std::string& body, double px) {
    char size[16];
    std::snprintf(size, sizeof size, "%g", std::floor(px * 10) / 10);  // rounded down: it still fits
    text(s, w / 2.0, y, body, "middle", std::string(" font-size=\"") + size + "\" font-weight=\"bold\"");
  };
  if (fit(chars) >= 10.0) {
    line(22, t, std::min(15.0, fit(chars)));
    return;
  }
  size_t cut = t.rfind(' ', t.size() / 2);  // two lines, split at the space nearest the middle
  if (cut == std::string::npos) cut = t.find(' ');
  if (cut == std::string::npos) {
    line(22, t, std::max(6.0, fit(chars)));
    return;
  }
  const std::string a = t.substr(0, cut), b = t.substr(cut + 1);
  const double px = std::max(6.0, std::min(12.0, fit(std::max(a.size(), b.size()))));
  line(14, a, px);
  line(14 + px + 2, b, px);
}

// Frame, grid, ticks, tick labels and axis labels.
void draw_axes(std::string& s, const Frame& f, const PlotOptions& o) {
  const double bottom = f.top + f.height, right = f.left + f.width;
  const auto whole = [](std::vector<double> t, const Range& r) {
    t.erase(std::remove_if(t.begin(), t.end(), [](double v) { return v != std::round(v); }), t.end());
    if (t.size() < 2)  // a range of a few units: every whole number in it
      for (double v = std::ceil(r.lo); v <= r.hi && t.size() < 12; v += 1) t.push_back(v);
    std::sort(t.begin(), t.end());
    t.erase(std::unique(t.begin(), t.end()), t.end());
    return t;
  };
  auto xt = f.xlog ? log_ticks(f.xr.lo, f.xr.hi) : nice_ticks(f.xr.lo, f.xr.hi);
  auto yt = f.ylog ? log_ticks(f.yr.lo, f.yr.hi) : nice_ticks(f.yr.lo, f.yr.hi);
  if (o.x.integer && !f.xlog) xt = whole(xt, f.xr);
  if (o.y.integer && !f.ylog) yt = whole(yt, f.yr);
  const double xstep = xt.size() >= 2 ? xt[1] - xt[0] : 1.0, ystep = yt.size() >= 2 ? yt[1] - yt[0] : 1.0;
  s += "<g class=\"axes\" stroke=\"#333\" stroke-width=\"1\">\n";
  for (double v : xt) {
    const double x = f.px(v);
    if (o.grid) s += "<line x1=\"" + num(x) + "\" y1=\"" + num(f.top) + "\" x2=\"" + num(x) + "\" y2=\"" + num(bottom) + "\" stroke=\"#e5e5e5\"/>\n";
    s += "<line x1=\"" + num(x) + "\" y1=\"" + num(bottom) + "\" x2=\"" + num(x) + "\" y2=\"" + num(bottom + 5) + "\"/>\n";
  }
  for (double v : yt) {
    const double y = f.py(v);
    if (o.grid) s += "<line x1=\"" + num(f.left) + "\" y1=\"" + num(y) + "\" x2=\"" + num(right) + "\" y2=\"" + num(y) + "\" stroke=\"#e5e5e5\"/>\n";
    s += "<line x1=\"" + num(f.left - 5) + "\" y1=\"" + num(y) + "\" x2=\"" + num(f.left) + "\" y2=\"" + num(y) + "\"/>\n";
  }
  s += "<rect x=\"" + num(f.left) + "\" y=\"" + num(f.top) + "\" width=\"" + num(f.width) + "\" height=\"" +
       num(f.height) + "\" fill=\"none\"/>\n</g>\n";
  for (double v : xt) text(s, f.px(v), bottom + 18, tick_label(v, xstep, f.xlog), "middle");
  for (double v : yt) text(s, f.left - 8, f.py(v) + 4, tick_label(v, ystep, f.ylog), "end");
  if (!o.x.label.empty()) text(s, f.left + f.width / 2, bottom + 38, o.x.label, "middle");
  if (!o.y.label.empty()) {
    const double cx = 16, cy = f.top + f.height / 2;
    text(s, cx, cy, o.y.label, "middle", " transform=\"rotate(-90 " + num(cx) + " " + num(cy) + ")\"");
  }
}

Frame make_frame(const PlotOptions& o, Range xr, Range yr) {
  Frame f;
  f.left = 72;
  f.top = o.title.empty() ? 16 : 38;
  f.width = o.width - f.left - 20;
  f.height = o.height - f.top - 52;
  HH_CHECK(f.width > 20 && f.height > 20, "plot: ", o.width, "x", o.height, " leaves no room for the plot area");
  f.xr = xr;
  f.yr = yr;
  f.xlog = o.x.log;
  f.ylog = o.y.log;
  return f;
}

void clip_path(std::string& s, const Frame& f) {
  s += "<defs><clipPath id=\"hh-plot-area\"><rect x=\"" + num(f.left) + "\" y=\"" + num(f.top) + "\" width=\"" +
       num(f.width) + "\" height=\"" + num(f.height) + "\"/></clipPath></defs>\n";
}

struct LegendEntry {
  std::string name, color;
  bool line;
};

void legend(std::string& s, const Frame& f, const std::vector<LegendEntry>& entries) {
  if (entries.empty()) return;
  size_t chars = 0;
  for (const auto& e : entries) chars = std::max(chars, e.name.size());
  const double w = 34 + kCharPx * static_cast<double>(chars), h = 8 + 18.0 * static_cast<double>(entries.size());
  const double x = f.left + f.width - w - 8, y = f.top + 8;
  s += "<g class=\"legend\">\n<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(w) + "\" height=\"" +
       num(h) + "\" fill=\"white\" fill-opacity=\"0.85\" stroke=\"#999\"/>\n";
  for (size_t i = 0; i < entries.size(); ++i) {
    const double cy = y + 13 + 18.0 * static_cast<double>(i);
    if (entries[i].line)
      s += "<line x1=\"" + num(x + 6) + "\" y1=\"" + num(cy) + "\" x2=\"" + num(x + 24) + "\" y2=\"" + num(cy) +
           "\" stroke=\"" + entries[i].color + "\" stroke-width=\"2\"/>\n";
    else
      s += "<circle cx=\"" + num(x + 15) + "\" cy=\"" + num(cy) + "\" r=\"4\" fill=\"" + entries[i].color + "\"/>\n";
    text(s, x + 30, cy + 4, entries[i].name, "start");
  }
  s += "</g>\n";
}

std::string series_color(const std::string& c, size_t i) { return c.empty() ? palette_color(i) : xml_escape(c); }

}  // namespace

std::array<uint8_t, 3> viridis(double t) {
  if (!std::isfinite(t)) t = 0.0;
  t = std::clamp(t, 0.0, 1.0) * 10.0;
  const int i = std::min(9, static_cast<int>(t));
  const double a = t - i;
  std::array<uint8_t, 3> c{};
  for (int k = 0; k < 3; ++k)
    c[static_cast<size_t>(k)] = static_cast<uint8_t>(std::lround(kViridis[i][k] * (1 - a) + kViridis[i + 1][k] * a));
  return c;
}

std::string rgb_hex(const std::array<uint8_t, 3>& c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", c[0], c[1], c[2]);
  return buf;
}

std::string palette_color(size_t i) { return kPalette[i % 10]; }

std::vector<double> nice_ticks(double lo, double hi, int target) {
  HH_CHECK(std::isfinite(lo) && std::isfinite(hi) && hi > lo, "nice_ticks: need finite lo < hi, got [", lo, ", ", hi, "]");
  target = std::max(2, target);
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  const double step = (norm < 1.5 ? 1.0 : norm < 3.0 ? 2.0 : norm < 7.0 ? 5.0 : 10.0) * mag;
  std::vector<double> t;
  const double eps = step * 1e-9;
  for (double k = std::ceil((lo - eps) / step); k * step <= hi + eps; k += 1.0) {
    const double v = k * step;
    t.push_back(std::fabs(v) < eps ? 0.0 : v);
  }
  return t;
}

std::string line_plot(const std::vector<LineSeries>& series, const PlotOptions& o) {
  std::vector<const std::vector<double>*> xs, ys;
  for (size_t i = 0; i < series.size(); ++i) {
    HH_CHECK(series[i].x.size() == series[i].y.size(), "line_plot: series ", i, " ('", series[i].name, "') has ",
             series[i].x.size(), " x values and ", series[i].y.size(), " y values");
    xs.push_back(&series[i].x);
    ys.push_back(&series[i].y);
  }
  const Frame f = make_frame(o, axis_range(xs, o.x, 0.0), axis_range(ys, o.y, 0.05));
  std::string s;
  open_svg(s, o.width, o.height);
  title(s, o.width, o.title);
  clip_path(s, f);
  draw_axes(s, f, o);
  std::vector<LegendEntry> entries;
  for (size_t i = 0; i < series.size(); ++i) {
    const LineSeries& ls = series[i];
    const std::string color = series_color(ls.color, i);
    if (!ls.name.empty()) entries.push_back({ls.name, color, true});
    s += "<g class=\"series\" clip-path=\"url(#hh-plot-area)\" fill=\"none\" stroke=\"" + color +
         "\" stroke-width=\"" + num(ls.stroke_width) + "\" stroke-linejoin=\"round\">\n";
    std::string pts;
    auto flush = [&] {
      if (!pts.empty()) s += "<polyline points=\"" + pts + "\"/>\n";
      pts.clear();
    };
    for (size_t k = 0; k < ls.x.size(); ++k) {
      if (!usable(ls.x[k], f.xlog) || !usable(ls.y[k], f.ylog)) {
        flush();
        continue;
      }
      if (!pts.empty()) pts += ' ';
      pts += num(f.px(ls.x[k])) + "," + num(f.py(ls.y[k]));
    }
    flush();
    if (ls.markers)
      for (size_t k = 0; k < ls.x.size(); ++k)
        if (usable(ls.x[k], f.xlog) && usable(ls.y[k], f.ylog))
          s += "<circle cx=\"" + num(f.px(ls.x[k])) + "\" cy=\"" + num(f.py(ls.y[k])) + "\" r=\"2.5\" fill=\"" + color + "\"/>\n";
    s += "</g>\n";
  }
  if (o.legend) legend(s, f, entries);
  s += "</svg>\n";
  return s;
}

std::string scatter_plot(const std::vector<ScatterSeries>& series, const PlotOptions& o) {
  std::vector<const std::vector<double>*> xs, ys;
  for (size_t i = 0; i < series.size(); ++i) {
    const ScatterSeries& ss = series[i];
    HH_CHECK(ss.x.size() == ss.y.size(), "scatter_plot: series ", i, " ('", ss.name, "') has ", ss.x.size(),
             " x values and ", ss.y.size(), " y values");
    HH_CHECK(ss.labels.empty() || ss.labels.size() == ss.x.size(), "scatter_plot: series ", i, " ('", ss.name,
             "') has ", ss.labels.size(), " labels for ", ss.x.size(), " points");
    HH_CHECK(ss.radius > 0 && ss.opacity >= 0 && ss.opacity <= 1, "scatter_plot: series ", i,
             " needs radius > 0 and opacity in [0, 1]");
    xs.push_back(&ss.x);
    ys.push_back(&ss.y);
  }
  const Frame f = make_frame(o, axis_range(xs, o.x, 0.05), axis_range(ys, o.y, 0.05));
  std::string s;
  open_svg(s, o.width, o.height);
  title(s, o.width, o.title);
  clip_path(s, f);
  draw_axes(s, f, o);
  std::vector<LegendEntry> entries;
  for (size_t i = 0; i < series.size(); ++i) {
    const ScatterSeries& ss = series[i];
    const std::string color = series_color(ss.color, i);
    if (!ss.name.empty()) entries.push_back({ss.name, color, false});
    s += "<g class=\"series\" clip-path=\"url(#hh-plot-area)\" fill=\"" + color + "\" fill-opacity=\"" +
         num(ss.opacity) + "\">\n";
    const std::string r = num(ss.radius);
    for (size_t k = 0; k < ss.x.size(); ++k) {
      if (!usable(ss.x[k], f.xlog) || !usable(ss.y[k], f.ylog)) continue;
      const double cx = f.px(ss.x[k]), cy = f.py(ss.y[k]);
      s += "<circle cx=\"" + num(cx) + "\" cy=\"" + num(cy) + "\" r=\"" + r + "\"/>\n";
      if (!ss.labels.empty() && !ss.labels[k].empty()) {
        // Labels stay inside the (clipped) plot area: points in the right quarter get theirs on
        // the left, points near the top get theirs below.
        const bool flip = cx > f.left + 0.75 * f.width;
        const bool below = cy - ss.radius - 14 < f.top;
        text(s, flip ? cx - ss.radius - 3 : cx + ss.radius + 3, below ? cy + ss.radius + 12 : cy - ss.radius - 2,
             ss.labels[k], flip ? "end" : "start", " fill=\"#222\" fill-opacity=\"1\"");
      }
    }
    s += "</g>\n";
  }
  if (o.legend) legend(s, f, entries);
  s += "</svg>\n";
  return s;
}

std::string heatmap(const std::vector<double>& values, int64_t rows, int64_t cols, const HeatmapOptions& o) {
  HH_CHECK(rows >= 1 && cols >= 1, "heatmap: needs at least one row and one column, got ", rows, "x", cols);
  HH_CHECK(static_cast<int64_t>(values.size()) == rows * cols, "heatmap: ", values.size(), " values for a ", rows,
           "x", cols, " matrix");
  HH_CHECK(o.row_labels.empty() || static_cast<int64_t>(o.row_labels.size()) == rows, "heatmap: ",
           o.row_labels.size(), " row labels for ", rows, " rows");
  HH_CHECK(o.col_labels.empty() || static_cast<int64_t>(o.col_labels.size()) == cols, "heatmap: ",
           o.col_labels.size(), " column labels for ", cols, " columns");
  double lo = INFINITY, hi = -INFINITY;
  for (double v : values)
    if (std::isfinite(v)) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  if (!(lo <= hi)) {
    lo = 0.0;
    hi = 1.0;
  }
  if (std::isfinite(o.vmin)) lo = o.vmin;
  if (std::isfinite(o.vmax)) hi = o.vmax;
  HH_CHECK(hi >= lo, "heatmap: vmax ", hi, " < vmin ", lo);
  if (hi - lo < 1e-300) hi = lo + 1.0;  // constant matrix: every cell gets the low color

  std::string s;
  open_svg(s, o.width, o.height);
  title(s, o.width, o.title);
  const double left = o.row_labels.empty() ? 62 : 62 + kCharPx * 4, top = o.title.empty() ? 16 : 38;
  const double right_pad = o.colorbar ? 92 : 20, bottom_pad = o.col_labels.empty() ? 52 : 70;
  const double pw = o.width - left - right_pad, ph = o.height - top - bottom_pad;
  HH_CHECK(pw > 20 && ph > 20, "heatmap: ", o.width, "x", o.height, " leaves no room for the matrix");
  const double cw = pw / static_cast<double>(cols), ch = ph / static_cast<double>(rows);

  s += "<g class=\"cells\" shape-rendering=\"crispEdges\" stroke=\"none\">\n";
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const double v = values[static_cast<size_t>(i * cols + j)];
      const std::string fill = std::isfinite(v) ? rgb_hex(viridis((v - lo) / (hi - lo))) : std::string("#d0d0d0");
      // Cells overlap by a hair so no background seams show between them.
      s += "<rect x=\"" + num(left + static_cast<double>(j) * cw) + "\" y=\"" + num(top + static_cast<double>(i) * ch) +
           "\" width=\"" + num(cw + 0.3) + "\" height=\"" + num(ch + 0.3) + "\" fill=\"" + fill + "\"/>\n";
    }
  s += "</g>\n<rect x=\"" + num(left) + "\" y=\"" + num(top) + "\" width=\"" + num(pw) + "\" height=\"" + num(ph) +
       "\" fill=\"none\" stroke=\"#333\"/>\n";

  // Row / column ticks: every label when given (and few enough to read), else round indices.
  auto index_ticks = [](int64_t n) {
    std::vector<int64_t> t;
    if (n == 1) return std::vector<int64_t>{0};
    for (double v : nice_ticks(0.0, static_cast<double>(n - 1), 6))
      if (std::fabs(v - std::round(v)) < 1e-9) t.push_back(static_cast<int64_t>(std::llround(v)));
    return t;
  };
  const bool all_rows = !o.row_labels.empty() && ch >= 9, all_cols = !o.col_labels.empty() && cw >= 9;
  std::vector<int64_t> rt, ct;
  if (all_rows) for (int64_t i = 0; i < rows; ++i) rt.push_back(i);
  else rt = index_ticks(rows);
  if (all_cols) for (int64_t j = 0; j < cols; ++j) ct.push_back(j);
  else ct = index_ticks(cols);
  for (int64_t i : rt) {
    const std::string label = o.row_labels.empty() ? std::to_string(i) : o.row_labels[static_cast<size_t>(i)];
    text(s, left - 6, top + (static_cast<double>(i) + 0.5) * ch + 4, label, "end");
  }
  for (int64_t j : ct) {
    const std::string label = o.col_labels.empty() ? std::to_string(j) : o.col_labels[static_cast<size_t>(j)];
    const double x = left + (static_cast<double>(j) + 0.5) * cw, y = top + ph + 16;
    if (o.col_labels.empty()) text(s, x, y, label, "middle");
    else text(s, x, y, label, "end", " transform=\"rotate(-45 " + num(x) + " " + num(y) + ")\"");
  }
  if (!o.x_label.empty()) text(s, left + pw / 2, o.height - 10, o.x_label, "middle");
  if (!o.y_label.empty()) {
    const double cx = 14, cy = top + ph / 2;
    text(s, cx, cy, o.y_label, "middle", " transform=\"rotate(-90 " + num(cx) + " " + num(cy) + ")\"");
  }

  if (o.colorbar) {
    const double bx = left + pw + 18, bw = 16;
    s += "<defs><linearGradient id=\"hh-viridis\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">\n";
    for (int k = 0; k <= 10; ++k)
      s += "<stop offset=\"" + num(k / 10.0) + "\" stop-color=\"" + rgb_hex(viridis(k / 10.0)) + "\"/>\n";
    s += "</linearGradient></defs>\n<rect x=\"" + num(bx) + "\" y=\"" + num(top) + "\" width=\"" + num(bw) +
         "\" height=\"" + num(ph) + "\" fill=\"url(#hh-viridis)\" stroke=\"#333\"/>\n";
    const auto ticks = nice_ticks(lo, hi, 5);
    const double step = ticks.size() >= 2 ? ticks[1] - ticks[0] : hi - lo;
    for (double v : ticks) {
      const double y = top + ph - (v - lo) / (hi - lo) * ph;
      s += "<line x1=\"" + num(bx + bw) + "\" y1=\"" + num(y) + "\" x2=\"" + num(bx + bw + 4) + "\" y2=\"" + num(y) +
           "\" stroke=\"#333\"/>\n";
      text(s, bx + bw + 7, y + 4, tick_label(v, step, false), "start");
    }
  }
  s += "</svg>\n";
  return s;
}

std::string heatmap(const Tensor& m, const HeatmapOptions& options) {
  HH_CHECK(m.defined() && m.dim() == 2, "heatmap: expected a 2-D tensor, got shape ",
           m.defined() ? m.shape() : Shape{});
  HH_CHECK(is_floating(m.dtype()), "heatmap: expected a floating tensor, got ", m.dtype());
  return heatmap(to_vector<double>(m), m.size(0), m.size(1), options);
}

void save_svg(const std::string& path, const std::string& svg) { write_file_atomic(path, svg); }

}  // namespace hh
