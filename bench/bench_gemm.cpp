// Our AVX-512 sgemm (kernels/sgemm_avx512.h) against OpenBLAS's cblas_sgemm, in the same run and
// the same loop: every iteration times one call of each, alternating, so both see the same
// machine state (these machines are shared and noisy). 2 threads. Reported per shape: GFLOP/s of
// each, our speed-up, and each as a fraction of the 2-thread AVX-512 FMA peak measured in the
// same run (bench/peak.h).
//
// Shapes: square n = 512, 1024, 2048 (no transposes) and the training shapes [M, N, K] with the
// three transpose combinations of the linear layer: forward y = x W^T (tb = 1), dx = dy W (none),
// dW = dy^T x (ta = 1).
//
//   build/bench/bench_gemm --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cblas.h>
#include "bench_util.h"

#include <chrono>
#include <cstdlib>
#include <map>
#include <vector>

#include "core/rng.h"
#include "core/threads.h"
#include "kernels/sgemm_avx512.h"
#include "peak.h"

namespace tformer {
namespace {

// Best of three measurements after a warm-up, cached per thread count.
double peak_gflops_512(int threads) {
  static std::map<int, double> cache;
  auto it = cache.find(threads);
  if (it != cache.end()) return it->second;
  bench::measure_peak_gflops(threads, 512, 2'000'000);  // warm up the clock
  double best = 0;
  for (int i = 0; i < 3; ++i) best = std::max(best, bench::measure_peak_gflops(threads, 512));
  return cache[threads] = best;
}

std::vector<float> random_floats(int64_t n, uint64_t stream) {
  std::vector<float> v(static_cast<size_t>(n));
  fill_uniform<float>(TensorView<float>(v.data(), {n}), 1234, stream, -1.0, 1.0);
  return v;
}

void BM_SgemmOwnVsOpenBlas(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  const bool ta = state.range(3) != 0, tb = state.range(4) != 0;
  constexpr int kThreads = 2;
  set_num_threads(kThreads);
  const auto A = random_floats(M * K, 1), B = random_floats(K * N, 2);
  std::vector<float> C_own(static_cast<size_t>(M * N)), C_blas(C_own.size());
  const int64_t lda = ta ? M : K, ldb = tb ? K : N;
  auto own = [&] { sgemm_avx512(C_own.data(), N, A.data(), lda, ta, B.data(), ldb, tb, M, N, K, 1.0f, 0.0f); };
  auto blas = [&] {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(M),
                static_cast<int>(N), static_cast<int>(K), 1.0f, A.data(), static_cast<int>(lda), B.data(),
                static_cast<int>(ldb), 0.0f, C_blas.data(), static_cast<int>(N));
  };
  own();  // first calls: pack buffers and OpenBLAS's own set-up
  blas();
  using clock = std::chrono::steady_clock;
  double t_own = 0, t_blas = 0;
  for (auto _ : state) {
    const auto t0 = clock::now();
    own();
    const auto t1 = clock::now();
    blas();
    const auto t2 = clock::now();
    t_own += std::chrono::duration<double>(t1 - t0).count();
    t_blas += std::chrono::duration<double>(t2 - t1).count();
    benchmark::DoNotOptimize(C_own.data());
    benchmark::DoNotOptimize(C_blas.data());
  }
  const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K) *
                       static_cast<double>(state.iterations());
  const double g_own = flops / t_own * 1e-9, g_blas = flops / t_blas * 1e-9, peak = peak_gflops_512(kThreads);
  state.counters["own_GFLOPs"] = g_own;
  state.counters["openblas_GFLOPs"] = g_blas;
  state.counters["speedup"] = g_own / g_blas;
  state.counters["own_frac_peak"] = g_own / peak;
  state.counters["openblas_frac_peak"] = g_blas / peak;
  state.SetLabel(sgemm_avx512_compiled() ? "" : "no AVX-512 build: own = cblas_sgemm");
}
void gemm_shapes(benchmark::internal::Benchmark* b) {
  for (int64_t n : {512, 1024, 2048}) b->Args({n, n, n, 0, 0});
  const int64_t training[][3] = {
      {768, 384, 128}, {768, 128, 512}, {8192, 1152, 384}, {8192, 384, 1536}, {256, 50257, 768}};
  for (const auto& s : training) {
    b->Args({s[0], s[1], s[2], 0, 1});  // y = x W^T
    b->Args({s[0], s[1], s[2], 0, 0});  // dx = dy W
    b->Args({s[0], s[1], s[2], 1, 0});  // dW = dy^T x
  }
}
BENCHMARK(BM_SgemmOwnVsOpenBlas)
    ->ArgNames({"M", "N", "K", "ta", "tb"})
    ->Apply(gemm_shapes)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace tformer

int main(int argc, char** argv) {
  return tformer::bench::benchmark_main(argc, argv, "measured 512-bit FMA throughput, 2 threads, bench/peak.h");
}
