// The GQA experiment's picture and table (docs/gqa.md) from bench/gqa_experiment.sh's results.tsv:
// validation loss against the steps trained after the multi-head original, per key/value head
// count K, for mean-pooled and first-head conversions uptrained; GQA and multi-head models trained
// from scratch for the same total steps as markers; the original as a line, and the original
// trained on for the same steps without conversion. Prints the markdown table: mean over seeds,
// the spread (largest minus smallest), and the KV cache bytes per token (2 x layers x K x head_dim
// x 4, the spec's formula for float32).
//
//   build/bench/bench_gqa_plot runs/gqa/results.tsv docs/images/gqa.png [--layers 4 --head-dim 16]
// writes docs/images/gqa.png and, from the first uptraining point on, docs/images/gqa-uptrained.png.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "plot/loss_curves.h"
#include "plot/png.h"

namespace {

using Key = std::tuple<std::string, int, std::string, int>;  // row, K, pool, steps

struct Stats {
  double mean = 0, lo = 0, hi = 0;
  int n = 0;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    fmt::print(stderr, "usage: bench_gqa_plot RESULTS.tsv OUT.png [--layers N --head-dim N]\n");
    return 1;
  }
  int layers = 4, head_dim = 16;
  for (int i = 3; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--layers") layers = std::atoi(argv[i + 1]);
    if (std::string(argv[i]) == "--head-dim") head_dim = std::atoi(argv[i + 1]);
  }
  std::ifstream in(argv[1]);
  if (!in) {
    fmt::print(stderr, "bench_gqa_plot: cannot open {}\n", argv[1]);
    return 1;
  }
  std::map<Key, std::vector<double>> values;
  std::string line;
  std::getline(in, line);  // header
  int max_steps = 0;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string seed, row, k, pool, steps, loss;
    if (!std::getline(f, seed, '\t') || !std::getline(f, row, '\t') || !std::getline(f, k, '\t') ||
        !std::getline(f, pool, '\t') || !std::getline(f, steps, '\t') || !std::getline(f, loss, '\t') || loss.empty())
      continue;
    values[{row, std::stoi(k), pool, std::stoi(steps)}].push_back(std::stod(loss));
    if (row == "mha") max_steps = std::max(max_steps, std::stoi(steps));
  }
  std::map<Key, Stats> stats;
  for (const auto& [key, v] : values) {
    Stats s;
    s.n = static_cast<int>(v.size());
    for (double x : v) s.mean += x / s.n;
    s.lo = *std::min_element(v.begin(), v.end());
    s.hi = *std::max_element(v.begin(), v.end());
    stats[key] = s;
  }
  auto get = [&](const std::string& row, int k, const std::string& pool, int steps) -> const Stats* {
    const auto it = stats.find({row, k, pool, steps});
    return it == stats.end() ? nullptr : &it->second;
  };
  const int up1 = max_steps / 20, up2 = max_steps / 10;

  // The picture: x = training steps after the original's.
  const std::array<std::array<uint8_t, 3>, 3> dark = {{{31, 119, 180}, {214, 39, 40}, {44, 160, 44}}};
  const std::array<std::array<uint8_t, 3>, 3> light = {{{140, 190, 230}, {240, 150, 150}, {150, 215, 150}}};
  std::vector<tformer::PlotSeries> series;
  if (const Stats* m = get("mha", 8, "-", max_steps)) {
    series.push_back({fmt::format("MHA, 8 kv heads ({} steps)", max_steps),
                      {90, 90, 90},
                      {{0, m->mean}, {up2, m->mean}},
                      true,
                      false});
    tformer::PlotSeries cont{"MHA trained on the same way", {0, 0, 0}, {{0, m->mean}}, true, true};
    for (int u : {up1, up2})
      if (const Stats* c = get("continued", 8, "-", u)) cont.points.emplace_back(u, c->mean);
    if (cont.points.size() > 1) series.push_back(std::move(cont));
    tformer::PlotSeries scratch{"MHA from scratch", {90, 90, 90}, {}, false, false};
    for (int u : {up1, up2})
      if (const Stats* c = get("scratch", 8, "-", max_steps + u)) scratch.points.emplace_back(u + 3, c->mean);
    if (!scratch.points.empty()) series.push_back(std::move(scratch));
  }
  const int ks[3] = {4, 2, 1};
  for (int i = 0; i < 3; ++i) {
    const int k = ks[i];
    for (const char* pool : {"mean", "first"}) {
      tformer::PlotSeries s{
          fmt::format("K={} {}, uptrained", k, std::string(pool) == "mean" ? "mean-pooled" : "first head"),
          std::string(pool) == "mean" ? dark[i] : light[i],
          {},
          true,
          true};
      if (const Stats* c = get("converted", k, pool, 0)) s.points.emplace_back(0, c->mean);
      for (int u : {up1, up2})
        if (const Stats* c = get("uptrained", k, pool, u)) s.points.emplace_back(u, c->mean);
      if (!s.points.empty()) series.push_back(std::move(s));
    }
    // Moved apart by a few steps (K=4 left, K=1 right, MHA rightmost) so that none hides another.
    tformer::PlotSeries scratch{fmt::format("K={} from scratch", k), dark[i], {}, false, false};
    for (int u : {up1, up2})
      if (const Stats* c = get("scratch", k, "-", max_steps + u)) scratch.points.emplace_back(u + 2 * i - 3, c->mean);
    if (!scratch.points.empty()) series.push_back(std::move(scratch));
  }
  const char* x_title = "steps trained after the multi-head original";
  tformer::write_png_rgb(argv[2], 900, 560, tformer::render_series(series, 900, 560, x_title, "val loss"));
  // The same from the first uptraining point on, where the rows lie close together: OUT-uptrained.png.
  std::vector<tformer::PlotSeries> zoom;
  for (const auto& c : series) {
    tformer::PlotSeries z = c;
    z.points.clear();
    for (const auto& p : c.points)
      if (p.first >= up1 - 5) z.points.push_back(p);  // the moved-apart markers too
    if (c.name.starts_with("MHA, 8")) z.points = {{up1, c.points.front().second}, {up2, c.points.front().second}};
    if (!z.points.empty()) zoom.push_back(std::move(z));
  }
  std::string zoom_path = argv[2];
  if (zoom_path.ends_with(".png")) zoom_path.resize(zoom_path.size() - 4);
  zoom_path += "-uptrained.png";
  tformer::write_png_rgb(zoom_path, 900, 560, tformer::render_series(zoom, 900, 560, x_title, "val loss"));

  // The table.
  const auto kv_bytes = [&](int k) { return 2 * layers * k * head_dim * 4; };
  const auto cell = [](const Stats* s) {
    return s ? fmt::format("{:.4f} ({:.4f}, n={})", s->mean, s->hi - s->lo, s->n) : std::string("-");
  };
  fmt::print("| model | KV bytes/token | after conversion | +{} steps ({}%) | +{} steps ({}%) |\n", up1,
             100 * up1 / max_steps, up2, 100 * up2 / max_steps);
  fmt::print("|---|---|---|---|---|\n");
  fmt::print("| MHA, 8 kv heads, {} steps | {} | {} | | |\n", max_steps, kv_bytes(8),
             cell(get("mha", 8, "-", max_steps)));
  fmt::print("| MHA trained on the same way (no conversion) | {} | | {} | {} |\n", kv_bytes(8),
             cell(get("continued", 8, "-", up1)), cell(get("continued", 8, "-", up2)));
  fmt::print("| MHA from scratch ({} + extra steps) | {} | | {} | {} |\n", max_steps, kv_bytes(8),
             cell(get("scratch", 8, "-", max_steps + up1)), cell(get("scratch", 8, "-", max_steps + up2)));
  for (int k : ks) {
    for (const char* pool : {"mean", "first"})
      fmt::print("| K={} {}, uptrained | {} | {} | {} | {} |\n", k,
                 std::string(pool) == "mean" ? "mean-pooled" : "first head", kv_bytes(k),
                 cell(get("converted", k, pool, 0)), cell(get("uptrained", k, pool, up1)),
                 cell(get("uptrained", k, pool, up2)));
    fmt::print("| K={} from scratch ({} + extra steps) | {} | | {} | {} |\n", k, max_steps, kv_bytes(k),
               cell(get("scratch", k, "-", max_steps + up1)), cell(get("scratch", k, "-", max_steps + up2)));
  }
  return 0;
}
