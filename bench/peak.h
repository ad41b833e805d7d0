// This CPU's peak FP32 rate, MEASURED in the same run as the benchmarks that quote a fraction of
// it: each thread runs 12 independent chains of fused multiply-adds (enough to hide the FMA
// latency and fill both FMA pipes) on vector registers of the given width. FLOPs = 2 per lane per
// FMA. It is the rate no sgemm can beat at the clock the machine runs at right now (a turbo or
// thermal state shared with the sgemm measurement), more honest on a VM than cores x nominal GHz
// x FLOP/cycle from a datasheet.
//
// Two widths are measured: 512-bit (AVX-512, when the build targets it) is the machine's peak;
// 256-bit (AVX2) is the ceiling of any kernel restricted to AVX2, such as OpenBLAS when the
// environment sets OPENBLAS_CORETYPE=Haswell (as these machines do: older OpenBLAS builds
// misbehave on newer cores).
#pragma once

#include <immintrin.h>
#include <omp.h>

#include <chrono>
#include <cstdint>

namespace tformer::bench {

namespace detail {
template <typename Vec, int kLanes, typename Fma, typename Set1, typename Store>
double fma_loop(int threads, int64_t iterations, Fma fma, Set1 set1, Store store) {
  constexpr int kChains = 12;
  volatile float sink = 0;
  const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
  {
    Vec acc[kChains];
    for (int c = 0; c < kChains; ++c) acc[c] = set1(1.0f + c * 1e-3f);
    const Vec a = set1(0.999999f), b = set1(1e-7f);
    for (int64_t i = 0; i < iterations; ++i)
      for (int c = 0; c < kChains; ++c) acc[c] = fma(acc[c], a, b);
    alignas(64) float tmp[kLanes];
    float s = 0;
    for (int c = 0; c < kChains; ++c) {
      store(tmp, acc[c]);
      for (float t : tmp) s += t;
    }
#pragma omp critical
    sink = sink + s;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  (void)sink;
  return 2.0 * kLanes * kChains * static_cast<double>(iterations) * threads / seconds * 1e-9;
}
}  // namespace detail

// GFLOP/s of `threads` threads doing nothing but FMAs on `bits`-wide registers (256 or 512).
inline double measure_peak_gflops(int threads, int bits, int64_t iterations = 20'000'000) {
#if defined(__AVX512F__)
  if (bits == 512)
    return detail::fma_loop<__m512, 16>(
        threads, iterations, [](__m512 x, __m512 a, __m512 b) { return _mm512_fmadd_ps(x, a, b); },
        [](float v) { return _mm512_set1_ps(v); }, [](float* p, __m512 v) { _mm512_store_ps(p, v); });
#endif
  return detail::fma_loop<__m256, 8>(
      threads, iterations, [](__m256 x, __m256 a, __m256 b) { return _mm256_fmadd_ps(x, a, b); },
      [](float v) { return _mm256_set1_ps(v); }, [](float* p, __m256 v) { _mm256_store_ps(p, v); });
}

}  // namespace tformer::bench
