// A decode step's matrix products alone, as bench_quant and bench_generate measure them: what the
// kernels reach against a plain read of the same bytes, without the rest of the step (attention,
// norms, RoPE, the activation, the passes' starts and ends). See bench_quant.cpp.
#pragma once

#include <algorithm>
#include <vector>

#include "bench_util.h"
#include "kernels/qlinear.h"
#include "model/model.h"

namespace tformer::bench {

// A decode step's products, in its passes: the weights of each pass (one input, one output each).
inline std::vector<std::vector<const Weight<float>*>> decode_passes(const ModelParams<float>& w) {
  std::vector<std::vector<const Weight<float>*>> passes;
  for (const auto& l : w.layers) {
    passes.push_back({&l.wq, &l.wk, &l.wv});
    passes.push_back({&l.wo});
    passes.push_back(l.w3.present() ? std::vector<const Weight<float>*>{&l.w1, &l.w3}
                                    : std::vector<const Weight<float>*>{&l.w1});
    passes.push_back({&l.w2});
  }
  passes.push_back({&w.output});
  return passes;
}

// The median of (a plain read of the products' bytes) / (the products), over `pairs` alternations.
inline double products_fraction(const ModelParams<float>& w, int64_t pairs) {
  const auto passes = decode_passes(w);
  int64_t width = 0, height = 0;
  double bytes = 0;
  for (const auto& pass : passes) {
    int64_t rows = 0;
    for (const Weight<float>* m : pass) {
      width = std::max(width, m->cols);
      rows += m->rows;
      bytes += static_cast<double>(m->rows * weight_row_bytes(m->type, m->cols));
    }
    height = std::max(height, rows);
  }
  std::vector<float> x(static_cast<size_t>(width)), y(static_cast<size_t>(height));
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * static_cast<float>((i * 37) % 101) - 0.5f;
  std::vector<StoredProduct> parts;
  auto run_products = [&] {
    const auto t0 = clock_type::now();
    for (const auto& pass : passes) {
      parts.clear();
      int64_t at = 0;
      for (const Weight<float>* m : pass) {
        parts.push_back({y.data() + at, m});
        at += m->rows;
      }
      stored_linear_shared(parts, x.data(), 1);
    }
    return seconds_since(t0);
  };
  // Windows as bench_quant's steps (run_file): kWindow products runs, the first (after a read) left out,
  // then kWindow reads; per pair the read window's median over the products window's.
  constexpr int kWindow = 4;
  std::vector<double> ratio, window_products, window_reads;
  for (int64_t p = 0; p < pairs + 1; ++p) {  // the first pair warms up
    window_products.clear();
    window_reads.clear();
    for (int i = 0; i < kWindow; ++i) {
      const double t = run_products();
      if (i > 0) window_products.push_back(t);
    }
    for (int i = 0; i < kWindow; ++i) window_reads.push_back(read_seconds(bytes));
    if (p > 0) ratio.push_back(median(window_reads) / median(window_products));
  }
  return median(ratio);
}

}  // namespace tformer::bench
