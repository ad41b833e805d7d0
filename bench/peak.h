// This CPU's peak FP32 rate, MEASURED in the same run as the benchmarks that quote a fraction of
// it: each thread runs 12 independent chains of fused multiply-adds (enough to hide the FMA
// latency and fill both FMA pipes) on vector registers of the given width. FLOPs = 2 per lane per
// FMA. It is the rate no sgemm can beat at the clock the machine runs at right now (a turbo or
// thermal state shared with the sgemm measurement), more honest on a VM than cores x nominal GHz
// x FLOP/cycle from a datasheet.
//
// Two widths are measured: 512-bit (AVX-512) is the machine's peak where it has AVX-512; 256-bit
// (AVX2 + FMA) is the ceiling of any kernel restricted to AVX2, such as OpenBLAS when the
// environment sets OPENBLAS_CORETYPE=Haswell (as these machines do: older OpenBLAS builds
// misbehave on newer cores). The loops are compiled for their instruction set with target
// attributes and chosen at run time, so the portable build (-DTFORMER_NATIVE=OFF) compiles too; a
// width the CPU lacks reports 0.
#pragma once

#include <immintrin.h>
#include <omp.h>

#include <chrono>
#include <cstdint>

namespace tformer::bench {

namespace detail {
constexpr int kChains = 12;

__attribute__((target("avx512f"))) inline float fma_loop_512(int64_t iterations) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(1.0f + c * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iterations; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  alignas(64) float tmp[16];
  float s = 0;
  for (int c = 0; c < kChains; ++c) {
    _mm512_store_ps(tmp, acc[c]);
    for (float t : tmp) s += t;
  }
  return s;
}

__attribute__((target("avx2,fma"))) inline float fma_loop_256(int64_t iterations) {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(1.0f + c * 1e-3f);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iterations; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  alignas(32) float tmp[8];
  float s = 0;
  for (int c = 0; c < kChains; ++c) {
    _mm256_store_ps(tmp, acc[c]);
    for (float t : tmp) s += t;
  }
  return s;
}
}  // namespace detail

// GFLOP/s of `threads` threads doing nothing but FMAs on `bits`-wide registers (256 or 512);
// 0 when this CPU lacks the instructions.
inline double measure_peak_gflops(int threads, int bits, int64_t iterations = 20'000'000) {
  const bool wide = bits == 512;
  if (wide ? !__builtin_cpu_supports("avx512f") : !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")))
    return 0.0;
  volatile float sink = 0;
  const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
  {
    const float s = wide ? detail::fma_loop_512(iterations) : detail::fma_loop_256(iterations);
#pragma omp critical
    sink = sink + s;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int lanes = wide ? 16 : 8;
  return 2.0 * lanes * detail::kChains * static_cast<double>(iterations) * threads / seconds * 1e-9;
}

}  // namespace tformer::bench
