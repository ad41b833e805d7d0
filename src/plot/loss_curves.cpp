#include "plot/loss_curves.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>

#include "core/error.h"
#include "core/file_io.h"
#include "plot/png.h"

namespace tformer {

namespace {

using Color = std::array<uint8_t, 3>;
constexpr Color kWhite = {255, 255, 255};
constexpr Color kBlack = {0, 0, 0};
constexpr Color kGrid = {228, 228, 228};
constexpr Color kText = {40, 40, 40};

// ---- the font: 5x7 glyphs, one 5-bit row each, bit 4 the leftmost pixel --------------------------

struct Glyph {
  char c;
  uint8_t rows[7];
};

constexpr Glyph kFont[] = {
    {'0', {0b01110, 0b10001, 0b10011, 0b10101, 0b11001, 0b10001, 0b01110}},
    {'1', {0b00100, 0b01100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110}},
    {'2', {0b01110, 0b10001, 0b00001, 0b00010, 0b00100, 0b01000, 0b11111}},
    {'3', {0b11111, 0b00010, 0b00100, 0b00010, 0b00001, 0b10001, 0b01110}},
    {'4', {0b00010, 0b00110, 0b01010, 0b10010, 0b11111, 0b00010, 0b00010}},
    {'5', {0b11111, 0b10000, 0b11110, 0b00001, 0b00001, 0b10001, 0b01110}},
    {'6', {0b00110, 0b01000, 0b10000, 0b11110, 0b10001, 0b10001, 0b01110}},
    {'7', {0b11111, 0b00001, 0b00010, 0b00100, 0b01000, 0b01000, 0b01000}},
    {'8', {0b01110, 0b10001, 0b10001, 0b01110, 0b10001, 0b10001, 0b01110}},
    {'9', {0b01110, 0b10001, 0b10001, 0b01111, 0b00001, 0b00010, 0b01100}},
    {'.', {0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b01100, 0b01100}},
    {'-', {0b00000, 0b00000, 0b00000, 0b11111, 0b00000, 0b00000, 0b00000}},
    {'+', {0b00000, 0b00100, 0b00100, 0b11111, 0b00100, 0b00100, 0b00000}},
    {'a', {0b00000, 0b00000, 0b01110, 0b00001, 0b01111, 0b10001, 0b01111}},
    {'e', {0b00000, 0b00000, 0b01110, 0b10001, 0b11111, 0b10000, 0b01110}},
    {'i', {0b00100, 0b00000, 0b01100, 0b00100, 0b00100, 0b00100, 0b01110}},
    {'l', {0b01100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110}},
    {'n', {0b00000, 0b00000, 0b10110, 0b11001, 0b10001, 0b10001, 0b10001}},
    {'o', {0b00000, 0b00000, 0b01110, 0b10001, 0b10001, 0b10001, 0b01110}},
    {'p',
     {0b00000, 0b00000, 0b11110, 0b10001, 0b11110, 0b10000, 0b10000}},  // x-height like the others (no descender row)
    {'r', {0b00000, 0b00000, 0b10110, 0b11001, 0b10000, 0b10000, 0b10000}},
    {'s', {0b00000, 0b00000, 0b01110, 0b10000, 0b01110, 0b00001, 0b11110}},
    {'t', {0b01000, 0b01000, 0b11100, 0b01000, 0b01000, 0b01001, 0b00110}},
    {'v', {0b00000, 0b00000, 0b10001, 0b10001, 0b10001, 0b01010, 0b00100}},
    {'b', {0b10000, 0b10000, 0b10110, 0b11001, 0b10001, 0b10001, 0b11110}},
    {'c', {0b00000, 0b00000, 0b01110, 0b10000, 0b10000, 0b10001, 0b01110}},
    {'d', {0b00001, 0b00001, 0b01101, 0b10011, 0b10001, 0b10001, 0b01111}},
    {'f', {0b00110, 0b01001, 0b01000, 0b11100, 0b01000, 0b01000, 0b01000}},
    {'g', {0b00000, 0b00000, 0b01111, 0b10001, 0b01111, 0b00001, 0b01110}},
    {'h', {0b10000, 0b10000, 0b10110, 0b11001, 0b10001, 0b10001, 0b10001}},
    {'j', {0b00010, 0b00000, 0b00110, 0b00010, 0b00010, 0b10010, 0b01100}},
    {'k', {0b10000, 0b10000, 0b10010, 0b10100, 0b11000, 0b10100, 0b10010}},
    {'m', {0b00000, 0b00000, 0b11010, 0b10101, 0b10101, 0b10001, 0b10001}},
    {'q', {0b00000, 0b00000, 0b01111, 0b10001, 0b01111, 0b00001, 0b00001}},
    {'u', {0b00000, 0b00000, 0b10001, 0b10001, 0b10001, 0b10011, 0b01101}},
    {'w', {0b00000, 0b00000, 0b10001, 0b10001, 0b10101, 0b10101, 0b01010}},
    {'x', {0b00000, 0b00000, 0b10001, 0b01010, 0b00100, 0b01010, 0b10001}},
    {'y', {0b00000, 0b00000, 0b10001, 0b10001, 0b01111, 0b00001, 0b01110}},
    {'z', {0b00000, 0b00000, 0b11111, 0b00010, 0b00100, 0b01000, 0b11111}},
    {'A', {0b01110, 0b10001, 0b10001, 0b11111, 0b10001, 0b10001, 0b10001}},
    {'H', {0b10001, 0b10001, 0b10001, 0b11111, 0b10001, 0b10001, 0b10001}},
    {'K', {0b10001, 0b10010, 0b10100, 0b11000, 0b10100, 0b10010, 0b10001}},
    {'M', {0b10001, 0b11011, 0b10101, 0b10101, 0b10001, 0b10001, 0b10001}},
    {'S', {0b01111, 0b10000, 0b10000, 0b01110, 0b00001, 0b00001, 0b11110}},
    {'=', {0b00000, 0b00000, 0b11111, 0b00000, 0b11111, 0b00000, 0b00000}},
    {'(', {0b00010, 0b00100, 0b01000, 0b01000, 0b01000, 0b00100, 0b00010}},
    {')', {0b01000, 0b00100, 0b00010, 0b00010, 0b00010, 0b00100, 0b01000}},
    {',', {0b00000, 0b00000, 0b00000, 0b00000, 0b01100, 0b00100, 0b01000}},
    {':', {0b00000, 0b01100, 0b01100, 0b00000, 0b01100, 0b01100, 0b00000}},
    {'%', {0b11000, 0b11001, 0b00010, 0b00100, 0b01000, 0b10011, 0b00011}},
    {'/', {0b00000, 0b00001, 0b00010, 0b00100, 0b01000, 0b10000, 0b00000}},
    {' ', {0, 0, 0, 0, 0, 0, 0}},
};
constexpr int kGlyphW = 5, kGlyphH = 7, kAdvance = 6;

const Glyph* find_glyph(char c) {
  for (const Glyph& g : kFont)
    if (g.c == c) return &g;
  return nullptr;
}

// ---- the canvas ------------------------------------------------------------------------------------

class Canvas {
 public:
  Canvas(int w, int h) : w_(w), h_(h), px_(static_cast<size_t>(w) * h * 3, 255) {}

  void set(int x, int y, const Color& c) {
    if (x < clip_x0_ || x > clip_x1_ || y < clip_y0_ || y > clip_y1_) return;
    if (x < 0 || y < 0 || x >= w_ || y >= h_) return;
    uint8_t* p = &px_[(static_cast<size_t>(y) * w_ + x) * 3];
    p[0] = c[0];
    p[1] = c[1];
    p[2] = c[2];
  }
  void fill(int x0, int y0, int x1, int y1, const Color& c) {  // inclusive corners
    for (int y = std::min(y0, y1); y <= std::max(y0, y1); ++y)
      for (int x = std::min(x0, x1); x <= std::max(x0, x1); ++x) set(x, y, c);
  }
  void hline(int x0, int x1, int y, const Color& c) { fill(x0, y, x1, y, c); }
  void vline(int x, int y0, int y1, const Color& c) { fill(x, y0, x, y1, c); }
  // A line `thick` pixels wide (Bresenham, a thick x thick square at each step).
  void line(int x0, int y0, int x1, int y1, int thick, const Color& c) {
    const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
    const int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    int err = dx + dy;
    const int lo = -(thick - 1) / 2, hi = thick / 2;
    for (;;) {
      fill(x0 + lo, y0 + lo, x0 + hi, y0 + hi, c);
      if (x0 == x1 && y0 == y1) break;
      const int e2 = 2 * err;
      if (e2 >= dy) {
        err += dy;
        x0 += sx;
      }
      if (e2 <= dx) {
        err += dx;
        y0 += sy;
      }
    }
  }
  // Text with its top-left corner at (x, y), each font pixel scale x scale.
  void text(int x, int y, std::string_view s, int scale, const Color& c) {
    for (char ch : s) {
      if (const Glyph* g = find_glyph(ch)) {
        for (int r = 0; r < kGlyphH; ++r)
          for (int k = 0; k < kGlyphW; ++k)
            if (g->rows[r] & (1 << (kGlyphW - 1 - k)))
              fill(x + k * scale, y + r * scale, x + (k + 1) * scale - 1, y + (r + 1) * scale - 1, c);
      } else {  // a character the font lacks: a hollow box, never silence
        fill(x, y, x + kGlyphW * scale - 1, y, c);
        fill(x, y + kGlyphH * scale - 1, x + kGlyphW * scale - 1, y + kGlyphH * scale - 1, c);
        fill(x, y, x, y + kGlyphH * scale - 1, c);
        fill(x + kGlyphW * scale - 1, y, x + kGlyphW * scale - 1, y + kGlyphH * scale - 1, c);
      }
      x += kAdvance * scale;
    }
  }
  static int text_width(std::string_view s, int scale) {
    return s.empty() ? 0 : (static_cast<int>(s.size()) * kAdvance - 1) * scale;
  }
  void clip(int x0, int y0, int x1, int y1) {
    clip_x0_ = x0;
    clip_y0_ = y0;
    clip_x1_ = x1;
    clip_y1_ = y1;
  }
  void unclip() { clip(0, 0, w_ - 1, h_ - 1); }

  std::vector<uint8_t> take() { return std::move(px_); }

 private:
  int w_, h_;
  std::vector<uint8_t> px_;
  int clip_x0_ = 0, clip_y0_ = 0, clip_x1_ = 1 << 30, clip_y1_ = 1 << 30;
};

// ---- axes ------------------------------------------------------------------------------------------

// A "nice" tick spacing near range / target: 1, 2 or 5 times a power of ten.
double nice_step(double range, int target) {
  const double raw = range / target;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  const double m = raw / p;
  return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

struct Axis {
  double lo, hi, step;
  std::vector<double> ticks;
  std::vector<std::string> labels;
};

Axis make_axis(double lo, double hi, int target, bool integer) {
  Axis a{lo, hi, nice_step(hi - lo, target), {}, {}};
  if (integer) a.step = std::max(a.step, 1.0);
  const double first = std::ceil(a.lo / a.step - 1e-9) * a.step;
  for (int i = 0;; ++i) {
    const double t = first + i * a.step;
    if (t > a.hi + 1e-9 * a.step) break;
    a.ticks.push_back(std::abs(t) < 1e-12 * a.step ? 0.0 : t);
  }
  const double biggest = std::max(std::abs(a.lo), std::abs(a.hi));
  const bool sci = biggest >= 1e7 || a.step < 1e-4;
  const int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(a.step) + 1e-9)));
  for (double t : a.ticks) {
    if (sci) {
      a.labels.push_back(fmt::format("{:.2e}", t));
    } else {
      a.labels.push_back(fmt::format("{:.{}f}", t, decimals));
    }
  }
  return a;
}

bool finite_number(const nlohmann::json& j) { return j.is_number() && std::isfinite(j.get<double>()); }

}  // namespace

PlotAxis plot_axis(double lo, double hi, int target, bool integer) {
  Axis a = make_axis(lo, hi, target, integer);
  return {a.lo, a.hi, a.step, std::move(a.ticks), std::move(a.labels)};
}

LossCurves read_loss_curves(const std::string& metrics_path) {
  return parse_loss_curves(read_file(metrics_path), metrics_path);
}

LossCurves parse_loss_curves(std::string_view text, const std::string& metrics_path) {
  LossCurves curves;
  size_t start = 0;
  int64_t line_no = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    const std::string_view line = text.substr(start, nl - start);
    start = nl + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail_file(metrics_path, "{}:{}: not valid JSON: {}", metrics_path, line_no, e.what());
    }
    if (!record.is_object()) fail_file(metrics_path, "{}:{}: expected a JSON object", metrics_path, line_no);
    const auto step = record.find("step");
    if (step == record.end() || !finite_number(*step)) continue;
    const double x = step->get<double>();
    if (auto it = record.find("train_loss"); it != record.end() && finite_number(*it))
      curves.train.emplace_back(x, it->get<double>());
    if (auto it = record.find("val_loss"); it != record.end() && finite_number(*it))
      curves.val.emplace_back(x, it->get<double>());
  }
  const auto by_step = [](const auto& a, const auto& b) { return a.first < b.first; };
  std::stable_sort(curves.train.begin(), curves.train.end(), by_step);
  std::stable_sort(curves.val.begin(), curves.val.end(), by_step);
  return curves;
}

std::vector<uint8_t> render_loss_curves(const LossCurves& curves, int width, int height) {
  if (curves.train.empty() && curves.val.empty()) fail_input("curves", "no train_loss or val_loss values to plot");
  std::vector<PlotSeries> series;
  if (!curves.train.empty()) series.push_back({"train", kTrainCurveColor, curves.train, true, false});
  if (!curves.val.empty()) series.push_back({"val", kValCurveColor, curves.val, true, true});
  return render_series(series, width, height, "step", "loss");
}

std::vector<uint8_t> render_series(const std::vector<PlotSeries>& series, int width, int height,
                                   const std::string& x_title, const std::string& y_title) {
  if (width < 160 || width > 8192 || height < 120 || height > 8192)
    fail_input(width < 160 || width > 8192 ? "width" : "height",
               "plot size must be within [160, 8192] x [120, 8192], got {}x{}", width, height);
  if (std::all_of(series.begin(), series.end(), [](const PlotSeries& s) { return s.points.empty(); }))
    fail_input("curves", "no points to plot");

  // Data ranges.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  double x_lo = kInf, x_hi = -kInf, y_lo = kInf, y_hi = -kInf;
  for (const auto& c : series)
    for (const auto& [x, y] : c.points) {
      x_lo = std::min(x_lo, x);
      x_hi = std::max(x_hi, x);
      y_lo = std::min(y_lo, y);
      y_hi = std::max(y_hi, y);
    }
  if (x_hi - x_lo < 1e-9) {
    x_lo -= 1;
    x_hi += 1;
  } else if (std::any_of(series.begin(), series.end(), [](const PlotSeries& s) { return !s.line; })) {
    // Markers alone are squares: keep the ones at the ends off the frame.
    const double pad = 0.03 * (x_hi - x_lo);
    x_lo -= pad;
    x_hi += pad;
  }
  if (y_hi - y_lo < 1e-12 * std::max(1.0, std::abs(y_hi))) {
    const double d = std::max(std::abs(y_hi) * 0.05, 0.05);
    y_lo -= d;
    y_hi += d;
  } else {
    const double pad = 0.05 * (y_hi - y_lo);
    y_lo -= pad;
    y_hi += pad;
  }

  const int scale = std::max(1, std::min(width / 800, height / 500) + (width >= 1200 && height >= 750 ? 1 : 0));
  const int glyph_h = kGlyphH * scale, tick = 4 * scale, gap = 4 * scale;
  const Axis ya = make_axis(y_lo, y_hi, std::max(3, height / (50 * scale)), false);
  const Axis xa0 = make_axis(x_lo, x_hi, 6, true);
  int y_label_w = 0;
  for (const auto& s : ya.labels) y_label_w = std::max(y_label_w, Canvas::text_width(s, scale));

  // Plot area: [px0, px1] x [py0, py1], y growing downwards.
  const int px0 = 8 * scale + y_label_w + gap + tick;
  const int px1 = width - 1 - 16 * scale;
  const int py0 = glyph_h + 12 * scale;
  const int py1 = height - 1 - (tick + gap + glyph_h + 2 * gap + glyph_h + 4 * scale);
  // Fewer x ticks when the labels would collide.
  int x_label_w = 0;
  for (const auto& s : xa0.labels) x_label_w = std::max(x_label_w, Canvas::text_width(s, scale));
  const int fit = std::max(2, (px1 - px0) / (x_label_w + 12 * scale));
  const Axis xa = static_cast<int>(xa0.ticks.size()) > fit ? make_axis(x_lo, x_hi, std::max(1, fit - 1), true) : xa0;

  const auto to_px = [&](double x) {
    return px0 + static_cast<int>(std::lround((x - x_lo) / (x_hi - x_lo) * (px1 - px0)));
  };
  const auto to_py = [&](double y) {
    return py1 - static_cast<int>(std::lround((y - y_lo) / (y_hi - y_lo) * (py1 - py0)));
  };

  Canvas cv(width, height);
  // Grid and ticks.
  for (size_t i = 0; i < ya.ticks.size(); ++i) {
    const int y = to_py(ya.ticks[i]);
    cv.hline(px0 + 1, px1, y, kGrid);
    cv.hline(px0 - tick, px0 - 1, y, kBlack);
    cv.text(px0 - tick - gap - Canvas::text_width(ya.labels[i], scale), y - glyph_h / 2, ya.labels[i], scale, kText);
  }
  for (size_t i = 0; i < xa.ticks.size(); ++i) {
    const int x = to_px(xa.ticks[i]);
    cv.vline(x, py0, py1 - 1, kGrid);
    cv.vline(x, py1 + 1, py1 + tick, kBlack);
    cv.text(x - Canvas::text_width(xa.labels[i], scale) / 2, py1 + tick + gap, xa.labels[i], scale, kText);
  }
  // Frame.
  cv.hline(px0, px1, py0, kBlack);
  cv.hline(px0, px1, py1, kBlack);
  cv.vline(px0, py0, py1, kBlack);
  cv.vline(px1, py0, py1, kBlack);
  // Axis titles: the x title centred below, the y title above the y axis.
  cv.text((px0 + px1 - Canvas::text_width(x_title, scale)) / 2, py1 + tick + gap + glyph_h + 2 * gap, x_title, scale,
          kText);
  cv.text(std::max(0, px0 - Canvas::text_width(y_title, scale) / 2), py0 - glyph_h - 6 * scale, y_title, scale, kText);

  // Curves, clipped to the inside of the frame.
  cv.clip(px0 + 1, py0 + 1, px1 - 1, py1 - 1);
  const int thick = 2 * scale, marker = 2 * scale;
  const auto draw_curve = [&](const std::vector<std::pair<double, double>>& pts, const Color& c, bool markers) {
    for (size_t i = 0; i + 1 < pts.size(); ++i)
      cv.line(to_px(pts[i].first), to_py(pts[i].second), to_px(pts[i + 1].first), to_py(pts[i + 1].second), thick, c);
    if (markers || pts.size() == 1)
      for (const auto& [x, y] : pts)
        cv.fill(to_px(x) - marker, to_py(y) - marker, to_px(x) + marker, to_py(y) + marker, c);
  };
  for (const auto& c : series) {
    if (c.line) {
      draw_curve(c.points, c.color, c.markers);
    } else {
      for (const auto& [x, y] : c.points)  // markers alone: a larger square
        cv.fill(to_px(x) - 2 * marker, to_py(y) - 2 * marker, to_px(x) + 2 * marker, to_py(y) + 2 * marker, c.color);
    }
  }
  cv.unclip();

  // Legend in the top-right corner of the plot area; an entry's swatch is a line, or a square for
  // markers alone.
  std::vector<const PlotSeries*> entries;
  int name_w = 0;
  for (const auto& c : series)
    if (!c.points.empty() && !c.name.empty()) {
      entries.push_back(&c);
      name_w = std::max(name_w, Canvas::text_width(c.name, scale));
    }
  const int swatch = 16 * scale, row_h = glyph_h + 6 * scale;
  const int lw = 6 * scale + swatch + gap + name_w + 6 * scale;
  const int lh = static_cast<int>(entries.size()) * row_h + 6 * scale;
  const int lx1 = px1 - 8 * scale, lx0 = lx1 - lw, ly0 = py0 + 8 * scale, ly1 = ly0 + lh;
  cv.fill(lx0, ly0, lx1, ly1, kWhite);
  cv.hline(lx0, lx1, ly0, kBlack);
  cv.hline(lx0, lx1, ly1, kBlack);
  cv.vline(lx0, ly0, ly1, kBlack);
  cv.vline(lx1, ly0, ly1, kBlack);
  for (size_t i = 0; i < entries.size(); ++i) {
    const int top = ly0 + 6 * scale + static_cast<int>(i) * row_h;
    const int mid = top + glyph_h / 2;
    const PlotSeries& e = *entries[i];
    if (e.line)
      cv.fill(lx0 + 6 * scale, mid - scale, lx0 + 6 * scale + swatch, mid + scale - 1, e.color);
    else
      cv.fill(lx0 + 6 * scale + swatch / 2 - 2 * marker, mid - 2 * marker, lx0 + 6 * scale + swatch / 2 + 2 * marker,
              mid + 2 * marker, e.color);
    cv.text(lx0 + 6 * scale + swatch + gap, top, e.name, scale, kText);
  }
  return cv.take();
}

void plot_loss_curves(const std::string& metrics_path, const std::string& png_path, int width, int height) {
  const LossCurves curves = read_loss_curves(metrics_path);
  if (curves.train.empty() && curves.val.empty())
    fail_file(metrics_path, "{}: no train_loss or val_loss values to plot", metrics_path);
  write_png_rgb(png_path, width, height, render_loss_curves(curves, width, height));
}

}  // namespace tformer
