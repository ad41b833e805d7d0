// The loss plot end to end: metrics.jsonl read into curves, drawn and written as a PNG that the
// independent decoder (png_test_util.h) reads back; degenerate inputs; errors naming the file and
// line, or the value that cannot be drawn.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "plot/loss_curves.h"
#include "png_test_util.h"
#include "test_util.h"

namespace tformer {
namespace {

namespace fs = std::filesystem;
using test::decode_png;
using test::Decoded;
using PngTest = test::PngTest;

int64_t count_color(const std::vector<uint8_t>& rgb, const std::array<uint8_t, 3>& c) {
  int64_t n = 0;
  for (size_t i = 0; i + 2 < rgb.size(); i += 3)
    if (rgb[i] == c[0] && rgb[i + 1] == c[1] && rgb[i + 2] == c[2]) ++n;
  return n;
}

TEST_F(PngTest, PlotOfThreePointsHasBothCurves) {
  put("metrics.jsonl",
      "{\"step\": 0, \"train_loss\": 5.5, \"val_loss\": 5.6}\n"
      "{\"step\": 100, \"train_loss\": 3.1, \"val_loss\": null, \"lr\": 0.001}\n"
      "{\"step\": 200, \"train_loss\": 2.2, \"val_loss\": 2.5}\n");
  const LossCurves curves = read_loss_curves(path("metrics.jsonl"));
  EXPECT_EQ(curves.train.size(), 3u);
  EXPECT_EQ(curves.val.size(), 2u);
  plot_loss_curves(path("metrics.jsonl"), path("loss.png"));
  const Decoded d = decode_png(slurp(path("loss.png")));
  EXPECT_EQ(d.width, 800);
  EXPECT_EQ(d.height, 500);
  // A line from (0, 5.5) to (200, 2.2) across ~750 pixels is hundreds of pixels of each colour.
  EXPECT_GT(count_color(d.rgb, kTrainCurveColor), 500);
  EXPECT_GT(count_color(d.rgb, kValCurveColor), 300);
  // Mostly background, and some dark pixels (axes, labels).
  EXPECT_GT(count_color(d.rgb, {255, 255, 255}), 800 * 500 / 2);
  EXPECT_GT(count_color(d.rgb, {0, 0, 0}), 1000);

  // Another size; a train-only file has no val colour.
  put("train-only.jsonl", "{\"step\": 1, \"train_loss\": 4}\n{\"step\": 2, \"train_loss\": 3}\n");
  plot_loss_curves(path("train-only.jsonl"), path("t.png"), 320, 200);
  const Decoded t = decode_png(slurp(path("t.png")));
  EXPECT_EQ(t.width, 320);
  EXPECT_EQ(t.height, 200);
  EXPECT_GT(count_color(t.rgb, kTrainCurveColor), 100);
  EXPECT_EQ(count_color(t.rgb, kValCurveColor), 0);
}

TEST_F(PngTest, PlotDegenerateInputs) {
  // One point, a flat curve, huge step numbers: all render without error.
  for (const std::string& text : {std::string("{\"step\": 5, \"train_loss\": 1.5}\n"),
                                  std::string("{\"step\": 1, \"val_loss\": 2}\n{\"step\": 2, \"val_loss\": 2}\n"),
                                  std::string("{\"step\": 100000000, \"train_loss\": 1e-9}\n"
                                              "{\"step\": 300000000, \"train_loss\": 2e-9}\n")}) {
    put("m.jsonl", text);
    plot_loss_curves(path("m.jsonl"), path("m.png"), 400, 300);
    const Decoded d = decode_png(slurp(path("m.png")));
    EXPECT_EQ(d.width, 400);
    EXPECT_GT(count_color(d.rgb, kTrainCurveColor) + count_color(d.rgb, kValCurveColor), 10) << text;
  }
}

TEST_F(PngTest, PlotErrorsNameFileAndLine) {
  put("bad.jsonl", "{\"step\": 1, \"train_loss\": 2}\n{\"step\": 2, \"train_loss\": \n");
  EXPECT_ERROR(plot_loss_curves(path("bad.jsonl"), path("x.png")), ErrorKind::BadFile, path("bad.jsonl"),
               path("bad.jsonl") + ":2:");
  put("empty.jsonl", "{\"step\": 1}\n");
  EXPECT_ERROR(plot_loss_curves(path("empty.jsonl"), path("x.png")), ErrorKind::BadFile, path("empty.jsonl"),
               "no train_loss or val_loss");
  EXPECT_ERROR(plot_loss_curves(path("missing.jsonl"), path("x.png")), ErrorKind::BadFile, path("missing.jsonl"));
  // The plot of curves that are not drawable: no values, a size out of range.
  EXPECT_ERROR(render_loss_curves(LossCurves{}, 800, 500), ErrorKind::BadInput, "curves");
  const LossCurves one{{{1.0, 2.0}}, {}};
  EXPECT_ERROR(render_loss_curves(one, 100, 500), ErrorKind::BadInput, "width", "got 100x500");
  EXPECT_ERROR(render_loss_curves(one, 800, 9000), ErrorKind::BadInput, "height", "got 800x9000");
  EXPECT_FALSE(fs::exists(path("x.png")));
}

TEST(PlotSeries, EachSeriesIsDrawnInItsColourAndMarkersAloneAsSquares) {
  const std::array<uint8_t, 3> red = {200, 0, 0}, green = {0, 150, 0}, violet = {120, 0, 200};
  const std::vector<PlotSeries> series{
      {"line", red, {{0, 2.0}, {10, 3.0}}, true, false},
      {"markers", green, {{5, 1.0}}, false, false},      // far from the line and the legend
      {"", violet, {{10, 1.0}, {0, 1.2}}, true, false},  // unnamed: drawn, not in the legend
  };
  const auto rgb = render_series(series, 800, 500, "extra steps", "val loss");
  ASSERT_EQ(rgb.size(), 800u * 500u * 3u);
  EXPECT_GT(count_color(rgb, red), 200);  // a 2-pixel line across the plot, and its swatch
  EXPECT_GT(count_color(rgb, violet), 200);
  EXPECT_EQ(count_color(rgb, green), 2 * 9 * 9);  // one 9x9 square in the plot, one in the legend
  EXPECT_ERROR(render_series({{"empty", red, {}, true, false}}, 800, 500, "x", "y"), ErrorKind::BadInput, "curves");
}

}  // namespace
}  // namespace tformer
