// Kernel throughput. sgemm at 512, 1024, 2048 with 1 and 2 threads, as GFLOP/s and as a fraction
// of the FP32 peak measured in the same run (bench/peak.h); every reference kernel's throughput,
// forward and backward, in bytes/s (the bytes each must read and write at least) or FLOP/s.
//
//   build/bench/bench_kernels --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include "bench_util.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <vector>

#include "core/rng.h"
#include "core/threads.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "kernels/softmax.h"
#include "peak.h"

namespace tformer {
namespace {

// Best of three measurements after a warm-up, cached per (threads, width).
double peak_gflops(int threads, int bits) {
  static std::map<std::pair<int, int>, double> cache;
  auto it = cache.find({threads, bits});
  if (it != cache.end()) return it->second;
  bench::measure_peak_gflops(threads, bits, 2'000'000);  // warm up the clock
  double best = 0;
  for (int i = 0; i < 3; ++i) best = std::max(best, bench::measure_peak_gflops(threads, bits));
  return cache[{threads, bits}] = best;
}

std::vector<float> random_floats(int64_t n, uint64_t stream) {
  std::vector<float> v(static_cast<size_t>(n));
  fill_uniform<float>(TensorView<float>(v.data(), {n}), 1234, stream, -1.0, 1.0);
  return v;
}

void BM_PeakFma(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0)), bits = static_cast<int>(state.range(1));
  double g = 0;
  for (auto _ : state) g = bench::measure_peak_gflops(threads, bits);
  state.counters["GFLOPs"] = g;
}
BENCHMARK(BM_PeakFma)
    ->ArgsProduct({{1, 2}, {256, 512}})
    ->ArgNames({"threads", "bits"})
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_Sgemm(benchmark::State& state) {
  const int64_t n = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  set_num_threads(threads);
  const auto A = random_floats(n * n, 1), B = random_floats(n * n, 2);
  std::vector<float> C(static_cast<size_t>(n * n));
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    gemm<float>(C.data(), n, A.data(), n, false, B.data(), n, false, n, n, n);
    benchmark::DoNotOptimize(C.data());
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double gflops = 2.0 * n * n * n * static_cast<double>(state.iterations()) / seconds * 1e-9;
  state.counters["GFLOPs"] = gflops;
  state.counters["frac_peak"] = gflops / peak_gflops(threads, 512);
  state.counters["frac_avx2_peak"] = gflops / peak_gflops(threads, 256);
}
BENCHMARK(BM_Sgemm)
    ->ArgsProduct({{512, 1024, 2048}, {1, 2}})
    ->ArgNames({"n", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Element-wise and row kernels: bytes counted as one read of the input and one write of the output.
void BM_Softmax(benchmark::State& state) {
  set_num_threads(2);
  const int64_t rows = 4096, cols = state.range(0);
  const auto x = random_floats(rows * cols, 3);
  std::vector<float> y(x.size());
  for (auto _ : state) softmax_forward<float>(y.data(), x.data(), rows, cols);
  state.SetBytesProcessed(state.iterations() * rows * cols * 8);
}
BENCHMARK(BM_Softmax)->Arg(256)->Arg(1024)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_LayerNorm(benchmark::State& state) {
  set_num_threads(2);
  const int64_t rows = 4096, cols = state.range(0);
  const auto x = random_floats(rows * cols, 4), g = random_floats(cols, 5), b = random_floats(cols, 6);
  std::vector<float> y(x.size()), mean(rows), rstd(rows);
  for (auto _ : state)
    layernorm_forward<float>(y.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(), rows, cols, 1e-5f);
  state.SetBytesProcessed(state.iterations() * rows * cols * 8);
}
BENCHMARK(BM_LayerNorm)->Arg(384)->Arg(768)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_LayerNormBackward(benchmark::State& state) {
  set_num_threads(2);
  const int64_t rows = 4096, cols = state.range(0);
  const auto x = random_floats(rows * cols, 4), g = random_floats(cols, 5), b = random_floats(cols, 6);
  const auto dy = random_floats(rows * cols, 7);
  std::vector<float> y(x.size()), mean(rows), rstd(rows), dx(x.size()), dg(cols), db(cols);
  layernorm_forward<float>(y.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(), rows, cols, 1e-5f);
  for (auto _ : state)
    layernorm_backward<float>(dx.data(), dg.data(), db.data(), dy.data(), x.data(), mean.data(), rstd.data(), g.data(),
                              rows, cols);
  state.SetBytesProcessed(state.iterations() * rows * cols * 12);  // read x, dy; read+write dx
}
BENCHMARK(BM_LayerNormBackward)->Arg(768)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Gelu(benchmark::State& state) {
  set_num_threads(2);
  const int64_t n = 1 << 22;
  const auto x = random_floats(n, 8);
  std::vector<float> y(x.size());
  const GeluKind kind = state.range(0) ? GeluKind::Tanh : GeluKind::Exact;
  for (auto _ : state) gelu_forward<float>(y.data(), x.data(), n, kind);
  state.SetBytesProcessed(state.iterations() * n * 8);
  state.SetLabel(state.range(0) ? "tanh" : "erf");
}
BENCHMARK(BM_Gelu)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Embedding(benchmark::State& state) {
  set_num_threads(2);
  const int64_t vocab = 32000, d = 768, n = 4096;
  const auto table = random_floats(vocab * d, 9);
  std::vector<TokenId> ids(n);
  Rng rng(1);
  for (auto& id : ids) id = static_cast<TokenId>(rng.below(vocab));
  std::vector<float> out(static_cast<size_t>(n * d));
  for (auto _ : state) embedding_forward<float>(out.data(), ids.data(), table.data(), n, vocab, d);
  state.SetBytesProcessed(state.iterations() * n * d * 8);
}
BENCHMARK(BM_Embedding)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_CrossEntropy(benchmark::State& state) {
  set_num_threads(2);
  const int64_t rows = 512, vocab = state.range(0);
  const auto logits = random_floats(rows * vocab, 10);
  std::vector<TokenId> targets(rows);
  for (int64_t r = 0; r < rows; ++r) targets[r] = static_cast<TokenId>((r * 7919) % vocab);
  std::vector<float> dlogits(logits.size());
  for (auto _ : state) {
    auto res = cross_entropy_forward<float>(nullptr, logits.data(), targets.data(), rows, vocab);
    cross_entropy_backward<float>(dlogits.data(), logits.data(), targets.data(), rows, vocab, res.count);
    benchmark::DoNotOptimize(res);
  }
  state.SetBytesProcessed(state.iterations() * rows * vocab * 16);  // forward read; backward read + rw
}
BENCHMARK(BM_CrossEntropy)->Arg(65)->Arg(32000)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Rope(benchmark::State& state) {
  set_num_threads(2);
  const int64_t tokens = 1024, heads = 12, hd = 64;
  auto x = random_floats(tokens * heads * hd, 11);
  std::vector<int64_t> pos(tokens);
  for (int64_t t = 0; t < tokens; ++t) pos[t] = t;
  RopeParams p{hd, 10000.0, RopePairing::Halves};
  for (auto _ : state) rope_forward<float>(x.data(), pos.data(), tokens, heads, heads * hd, p);
  state.SetBytesProcessed(state.iterations() * tokens * heads * hd * 8);
}
BENCHMARK(BM_Rope)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_SoftmaxBackward(benchmark::State& state) {
  set_num_threads(2);
  const int64_t rows = 4096, cols = 1024;
  const auto x = random_floats(rows * cols, 3), dy = random_floats(rows * cols, 30);
  std::vector<float> y(x.size()), dx(x.size());
  softmax_forward<float>(y.data(), x.data(), rows, cols);
  for (auto _ : state) softmax_backward<float>(dx.data(), dy.data(), y.data(), rows, cols);
  state.SetBytesProcessed(state.iterations() * rows * cols * 16);  // read y, dy; read+write dx
}
BENCHMARK(BM_SoftmaxBackward)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_LogSoftmax(benchmark::State& state) {
  set_num_threads(2);
  const int64_t rows = 4096, cols = 1024;
  const auto x = random_floats(rows * cols, 31), dy = random_floats(rows * cols, 32);
  std::vector<float> y(x.size()), dx(x.size());
  const bool backward = state.range(0) == 1;
  log_softmax_forward<float>(y.data(), x.data(), rows, cols);
  for (auto _ : state) {
    if (backward)
      log_softmax_backward<float>(dx.data(), dy.data(), y.data(), rows, cols);
    else
      log_softmax_forward<float>(y.data(), x.data(), rows, cols);
  }
  state.SetBytesProcessed(state.iterations() * rows * cols * (backward ? 16 : 8));
  state.SetLabel(backward ? "backward" : "forward");
}
BENCHMARK(BM_LogSoftmax)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_RmsNorm(benchmark::State& state) {
  set_num_threads(2);
  const int64_t rows = 4096, cols = 768;
  const auto x = random_floats(rows * cols, 33), g = random_floats(cols, 34), dy = random_floats(rows * cols, 35);
  std::vector<float> y(x.size()), rstd(rows), dx(x.size()), dg(cols);
  const bool backward = state.range(0) == 1;
  rmsnorm_forward<float>(y.data(), rstd.data(), x.data(), g.data(), rows, cols, 1e-5f);
  for (auto _ : state) {
    if (backward)
      rmsnorm_backward<float>(dx.data(), dg.data(), dy.data(), x.data(), rstd.data(), g.data(), rows, cols);
    else
      rmsnorm_forward<float>(y.data(), rstd.data(), x.data(), g.data(), rows, cols, 1e-5f);
  }
  state.SetBytesProcessed(state.iterations() * rows * cols * (backward ? 16 : 8));
  state.SetLabel(backward ? "backward" : "forward");
}
BENCHMARK(BM_RmsNorm)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_GeluBackward(benchmark::State& state) {
  set_num_threads(2);
  const int64_t n = 1 << 22;
  const auto x = random_floats(n, 36), dy = random_floats(n, 37);
  std::vector<float> dx(x.size());
  const GeluKind kind = state.range(0) ? GeluKind::Tanh : GeluKind::Exact;
  for (auto _ : state) gelu_backward<float>(dx.data(), dy.data(), x.data(), n, kind);
  state.SetBytesProcessed(state.iterations() * n * 16);
  state.SetLabel(state.range(0) ? "tanh" : "erf");
}
BENCHMARK(BM_GeluBackward)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_SwiGlu(benchmark::State& state) {
  set_num_threads(2);
  const int64_t n = 1 << 22;
  const auto a = random_floats(n, 38), b = random_floats(n, 39), dy = random_floats(n, 40);
  std::vector<float> y(n), da(n), db(n);
  const bool backward = state.range(0) == 1;
  for (auto _ : state) {
    if (backward)
      swiglu_backward<float>(da.data(), db.data(), dy.data(), a.data(), b.data(), n);
    else
      swiglu_forward<float>(y.data(), a.data(), b.data(), n);
  }
  state.SetBytesProcessed(state.iterations() * n * (backward ? 28 : 12));
  state.SetLabel(backward ? "backward" : "forward");
}
BENCHMARK(BM_SwiGlu)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_EmbeddingBackward(benchmark::State& state) {
  set_num_threads(2);
  const int64_t vocab = 32000, d = 768, n = 4096;
  const auto dout = random_floats(n * d, 41);
  std::vector<TokenId> ids(n);
  Rng rng(2);
  for (auto& id : ids) id = static_cast<TokenId>(rng.below(vocab));
  std::vector<float> dtable(static_cast<size_t>(vocab * d));
  for (auto _ : state) embedding_backward<float>(dtable.data(), dout.data(), ids.data(), n, vocab, d);
  state.SetBytesProcessed(state.iterations() * n * d * 12);
}
BENCHMARK(BM_EmbeddingBackward)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_RopeBackward(benchmark::State& state) {
  set_num_threads(2);
  const int64_t tokens = 1024, heads = 12, hd = 64;
  auto dx = random_floats(tokens * heads * hd, 42);
  std::vector<int64_t> pos(tokens);
  for (int64_t t = 0; t < tokens; ++t) pos[t] = t;
  RopeParams p{hd, 10000.0, RopePairing::Adjacent};
  for (auto _ : state) rope_backward<float>(dx.data(), pos.data(), tokens, heads, heads * hd, p);
  state.SetBytesProcessed(state.iterations() * tokens * heads * hd * 8);
}
BENCHMARK(BM_RopeBackward)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The linear layer as the model calls it (x W^T, and the two transposed products of its backward).
void BM_Linear(benchmark::State& state) {
  set_num_threads(2);
  const int64_t n = 768, in = 768, out = 3072;  // one FFN projection of a 768-wide model, 768 tokens
  const auto x = random_floats(n * in, 43), W = random_floats(out * in, 44), b = random_floats(out, 45);
  const auto dy = random_floats(n * out, 46);
  std::vector<float> y(n * out), dx(n * in), dW(out * in), db(out);
  const bool backward = state.range(0) == 1;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    if (backward)
      linear_backward<float>(dx.data(), dW.data(), db.data(), dy.data(), x.data(), W.data(), n, in, out);
    else
      linear_forward<float>(y.data(), x.data(), W.data(), b.data(), n, in, out);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double flops = (backward ? 4.0 : 2.0) * n * in * out * static_cast<double>(state.iterations());
  state.counters["GFLOPs"] = flops / seconds * 1e-9;
  state.SetLabel(backward ? "backward (dx, dW, db)" : "forward");
}
BENCHMARK(BM_Linear)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// The reference attention materialises P: FLOPs 4 * B * H * Tq * Tk * hd (QK^T and PV), causal
// halves the useful part but the reference computes every score.
void BM_AttentionReference(benchmark::State& state) {
  set_num_threads(2);
  const int64_t T = state.range(0), H = 8, hd = 64;
  const auto q = random_floats(T * H * hd, 12), k = random_floats(T * H * hd, 13), v = random_floats(T * H * hd, 14);
  std::vector<float> out(q.size()), probs(static_cast<size_t>(H * T * T));
  AttentionShape s{1, T, T, H, H, hd};
  AttentionMask m;
  for (auto _ : state)
    attention_forward<float>(heads_btHd(out.data(), T, H, hd), probs.data(), heads_btHd(q.data(), T, H, hd),
                             heads_btHd(k.data(), T, H, hd), heads_btHd(v.data(), T, H, hd), s, m);
  state.counters["GFLOP"] =
      benchmark::Counter(4.0 * H * T * T * hd * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AttentionReference)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_AttentionReferenceBackward(benchmark::State& state) {
  set_num_threads(2);
  const int64_t T = state.range(0), H = 8, hd = 64;
  const auto q = random_floats(T * H * hd, 12), k = random_floats(T * H * hd, 13), v = random_floats(T * H * hd, 14);
  const auto dout = random_floats(T * H * hd, 15);
  std::vector<float> out(q.size()), probs(static_cast<size_t>(H * T * T)), dq(q.size()), dk(q.size()), dv(q.size());
  AttentionShape s{1, T, T, H, H, hd};
  AttentionMask m;
  attention_forward<float>(heads_btHd(out.data(), T, H, hd), probs.data(), heads_btHd(q.data(), T, H, hd),
                           heads_btHd(k.data(), T, H, hd), heads_btHd(v.data(), T, H, hd), s, m);
  for (auto _ : state)
    attention_backward<float>(heads_btHd(dq.data(), T, H, hd), heads_btHd(dk.data(), T, H, hd),
                              heads_btHd(dv.data(), T, H, hd), heads_btHd(dout.data(), T, H, hd), probs.data(),
                              heads_btHd(q.data(), T, H, hd), heads_btHd(k.data(), T, H, hd),
                              heads_btHd(v.data(), T, H, hd), s, m);
  // dV, dP, dQ, dK: four products of 2 T^2 hd FLOPs per head.
  state.counters["GFLOP"] =
      benchmark::Counter(8.0 * H * T * T * hd * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AttentionReferenceBackward)->Arg(256)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace tformer

int main(int argc, char** argv) {
  return tformer::bench::benchmark_main(argc, argv, "measured FMA throughput, bench/peak.h");
}
