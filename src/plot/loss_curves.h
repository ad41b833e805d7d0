// Loss curves as a PNG, drawn here pixel by pixel (no plotting library): the train loss and the
// validation loss against the step, autoscaled axes with tick labels in a built-in 5x7 bitmap font,
// light grid lines at the ticks, a legend, and markers on the validation points (they are sparse).
//
// Input: metrics.jsonl as the trainer writes it (train/data.h, append_metrics), one JSON object per
// line, parsed here (the plot module depends on nothing but core); the plot reads "step",
// "train_loss" and "val_loss". A record without a numeric "step" is skipped,
// as is a loss that is absent, null or not finite; points are sorted by step.
//
//   tformer plot --run runs/shakespeare            # runs/shakespeare/metrics.jsonl -> .../loss.png
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tformer {

inline constexpr std::array<uint8_t, 3> kTrainCurveColor = {31, 119, 180};  // blue
inline constexpr std::array<uint8_t, 3> kValCurveColor = {255, 127, 14};    // orange

struct LossCurves {
  std::vector<std::pair<double, double>> train, val;  // (step, loss), sorted by step
};

// Reads a metrics.jsonl file; errors name the file and line ("m.jsonl:3: not valid JSON: ...").
LossCurves read_loss_curves(const std::string& metrics_path);
// The same from the file's text (`metrics_path` names it in the errors).
LossCurves parse_loss_curves(std::string_view text, const std::string& metrics_path);

// An axis as the plot draws it: ticks at a "nice" step (1, 2 or 5 times a power of ten; at least 1
// when `integer`) near (hi - lo) / target, from the first multiple of the step at or above lo to hi,
// and their labels with as many decimals as the step needs (scientific for very large or small).
struct PlotAxis {
  double lo = 0, hi = 0, step = 0;
  std::vector<double> ticks;
  std::vector<std::string> labels;
};
PlotAxis plot_axis(double lo, double hi, int target, bool integer);

// The plot as width x height RGB pixels (row-major, top row first). Throws Error when both curves
// are empty or the size is outside [160, 8192] x [120, 8192].
std::vector<uint8_t> render_loss_curves(const LossCurves& curves, int width, int height);

// Any named series the same way (render_loss_curves is this with "train" and "val"): each a line
// through its points (with square markers when `markers`), or markers alone (`line` false, larger
// squares); a legend entry per named series, in order. Errors as render_loss_curves.
struct PlotSeries {
  std::string name;
  std::array<uint8_t, 3> color;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in this order
  bool line = true, markers = false;
};
std::vector<uint8_t> render_series(const std::vector<PlotSeries>& series, int width, int height,
                                   const std::string& x_title, const std::string& y_title);

// read_loss_curves + render_loss_curves + write_png_rgb (atomic). Errors name the files.
void plot_loss_curves(const std::string& metrics_path, const std::string& png_path, int width = 800, int height = 500);

}  // namespace tformer
