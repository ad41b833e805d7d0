// Kernel throughput. sgemm at 512, 1024, 2048 with 1 and 2 threads, as GFLOP/s and as a fraction
// of the FP32 peak measured in the same run (bench/peak.h); every reference kernel's throughput
// in bytes/s (the bytes each must read and write at least) or FLOP/s.
//
//   build/bench/bench_kernels --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <cmath>
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
    layernorm_backward<float>(dx.data(), dg.data(), db.data(), dy.data(), x.data(), mean.data(), rstd.data(),
                              g.data(), rows, cols);
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

}  // namespace
}  // namespace tformer

int main(int argc, char** argv) {
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  benchmark::AddCustomContext("openblas", tformer::blas_config());
  benchmark::AddCustomContext("OPENBLAS_CORETYPE", coretype ? coretype : "(unset)");
  benchmark::AddCustomContext("peak", "measured FMA throughput, bench/peak.h");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
