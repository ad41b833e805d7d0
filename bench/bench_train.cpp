// One training step's phases on the benchmark's training shapes (nanoGPT's small and bigger
// Shakespeare configs, GPT-2 124M), with random weights and tokens: forward (with
// the loss), backward, and clip + AdamW, each the median of --reps runs, and the whole step's
// FLOP rate against the 2-thread sgemm rate measured in the same run. The end-to-end comparison
// with PyTorch is bench/train.sh; this program says where a step's time goes.
//
//   build/bench/bench_train [--shape small|bigger|gpt2|all] [--reps 5]
//
// FLOPs per step (bench/train.sh uses the same formula): B T (6 N + 6 d V + 12 L T d), N the
// non-embedding parameters, the causal half of attention not discounted.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/rng.h"
#include "core/threads.h"
#include "kernels/matmul.h"
#include "model/model.h"
#include "train/graph.h"
#include "train/optimizer.h"

namespace tformer {
namespace {

using bench::clock_type;
using bench::median;
using bench::seconds_since;
using bench::sgemm_gflops;

struct TrainShape {
  const char* name;
  int64_t layers, heads, d, T, B, V, context_length;
};

void run(const TrainShape& s, int reps, double sgemm) {
  ModelConfig c;
  c.vocab_size = s.V;
  c.context_length = s.context_length;
  c.d_model = s.d;
  c.n_layers = s.layers;
  c.n_heads = s.heads;
  c.validate();
  Model m(c);
  m.init_gpt2(1);
  Arena grads;
  grads.mirror(m.params());
  AdamW opt(m.params(), AdamWConfig{0.9, 0.99, 1e-8, 0.1});
  TrainGraph<float> g(c, s.B, s.T);
  std::vector<TokenId> in(s.B * s.T), tg(s.B * s.T);
  Rng rng(3);
  for (auto& t : in) t = static_cast<TokenId>(rng.below(s.V));
  for (auto& t : tg) t = static_cast<TokenId>(rng.below(s.V));
  std::vector<double> tf, tb, to;
  for (int r = 0; r < reps + 1; ++r) {
    auto t0 = clock_type::now();
    g.forward(m.params(), in.data(), tg.data());
    const double f = seconds_since(t0);
    t0 = clock_type::now();
    std::memset(grads.data(), 0, grads.size() * sizeof(float));
    g.backward(m.params(), grads);
    const double b = seconds_since(t0);
    t0 = clock_type::now();
    clip_grad_norm(grads, 1.0);
    opt.step(m.params(), grads, 1e-4);
    const double o = seconds_since(t0);
    if (r == 0) continue;  // warm-up
    tf.push_back(f);
    tb.push_back(b);
    to.push_back(o);
  }
  const double L = s.layers, d = s.d, T = s.T, V = s.V;
  const double N = L * (12 * d * d + 13 * d) + 2 * d;
  const double flops = s.B * T * (6 * N + 6 * d * V + 12 * L * T * d);
  const double step = median(tf) + median(tb) + median(to);
  fmt::print(
      "{:<7} forward {:8.2f} ms  backward {:8.2f} ms  clip+adamw {:7.2f} ms  step {:8.2f} ms  "
      "{:6.1f} GFLOP/s = {:.2f} of sgemm  ({:.0f} tokens/s, activations {:.0f} MB)\n",
      s.name, median(tf) * 1e3, median(tb) * 1e3, median(to) * 1e3, step * 1e3, flops / step * 1e-9,
      flops / step * 1e-9 / sgemm, s.B * T / step, g.activation_bytes() / 1e6);
}

}  // namespace
}  // namespace tformer

int main(int argc, char** argv) {
  using namespace tformer;
  std::string which = "all";
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--shape") which = argv[i + 1];
    if (std::string(argv[i]) == "--reps") reps = std::stoi(argv[i + 1]);
  }
  const double sgemm = sgemm_gflops(5);
  fmt::print("threads {}, sgemm 1024^3 {:.1f} GFLOP/s (median of 5)\n", num_threads(), sgemm);
  const TrainShape shapes[] = {{"small", 4, 4, 128, 64, 12, 65, 64},
                               {"bigger", 6, 6, 384, 256, 32, 65, 256},
                               {"gpt2", 12, 12, 768, 64, 4, 50257, 1024}};
  for (const TrainShape& s : shapes)
    if (which == "all" || which == s.name) run(s, reps, sgemm);
}
