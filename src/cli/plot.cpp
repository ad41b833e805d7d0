// tformer plot: the loss curves of a training run (metrics.jsonl) as a PNG.
//
//   tformer plot --run runs/ts                       # runs/ts/metrics.jsonl -> runs/ts/loss.png
//   tformer plot --metrics m.jsonl --out loss.png [--width 800 --height 500]
#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "core/error.h"
#include "plot/loss_curves.h"
#include "plot/png.h"

namespace tformer::cli {

namespace {

struct PlotOptions {
  std::string metrics, run, out;
  int width = 800, height = 500;
};

void run_plot(const PlotOptions& o) {
  if (o.metrics.empty() == o.run.empty())
    fail_input("--metrics", "plot: give exactly one of --metrics FILE and --run DIR");
  const std::filesystem::path run(o.run);
  const std::string metrics = o.metrics.empty() ? (run / "metrics.jsonl").string() : o.metrics;
  std::string out = o.out;
  if (out.empty()) {
    if (o.run.empty()) fail_input("--out", "plot: --out is required with --metrics");
    out = (run / "loss.png").string();
  }
  const LossCurves curves = read_loss_curves(metrics);
  if (curves.train.empty() && curves.val.empty())
    fail_file(metrics, "{}: no train_loss or val_loss values to plot", metrics);
  write_png_rgb(out, o.width, o.height, render_loss_curves(curves, o.width, o.height));
  fmt::print("wrote {} ({}x{}): {} train points, {} val points\n", out, o.width, o.height, curves.train.size(),
             curves.val.size());
}

}  // namespace

void register_plot(CLI::App& app) {
  auto o = std::make_shared<PlotOptions>();
  auto* cmd = app.add_subcommand("plot", "Draw a run's train and validation loss curves as a PNG");
  cmd->add_option("--metrics", o->metrics, "metrics.jsonl written by tformer train");
  cmd->add_option("--run", o->run, "Run folder: reads DIR/metrics.jsonl, writes DIR/loss.png unless --out");
  cmd->add_option("--out", o->out, "Output PNG file");
  cmd->add_option("--width", o->width, "Image width in pixels")->capture_default_str()->check(CLI::Range(160, 8192));
  cmd->add_option("--height", o->height, "Image height in pixels")->capture_default_str()->check(CLI::Range(120, 8192));
  cmd->callback([o] { run_plot(*o); });
}

}  // namespace tformer::cli
