// Small helpers the benchmark programs share: wall-clock timing, medians, the sgemm rate they quote
// fractions of, and the Google Benchmark main() with the machine context printed.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "core/memory.h"
#include "core/threads.h"
#include "kernels/matmul.h"

namespace tformer::bench {

using clock_type = std::chrono::steady_clock;
inline double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}
// The upper median (v non-empty).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// GFLOP/s of gemm<float> (whichever kernel it dispatches to) at n = 1024 with the current thread
// count: the median of `reps` timed calls after one warm-up call.
inline double sgemm_gflops(int reps) {
  const int64_t n = 1024;
  std::vector<float> A(n * n, 0.5f), B(n * n, 0.25f), C(n * n);
  std::vector<double> rates;
  for (int r = 0; r < reps + 1; ++r) {
    const auto t0 = clock_type::now();
    gemm<float>(C.data(), n, A.data(), n, false, B.data(), n, false, n, n, n);
    const double t = seconds_since(t0);
    if (r > 0) rates.push_back(2.0 * n * n * n / t * 1e-9);
  }
  return median(rates);
}

// GB/s of a plain read of a buffer far larger than the caches, on every thread.
inline double read_bandwidth_gbs(int reps) {
  const int64_t n = int64_t{1} << 28;  // 1 GiB of floats
  std::vector<float> buf(n, 1.0f);
  std::vector<double> rates;
  for (int r = 0; r < reps; ++r) {
    double total = 0;
    const auto t0 = clock_type::now();
    // 128 independent running sums per thread (eight 16-float vectors), so that the loop is bound
    // by the reads, not by the latency of one chain of additions (which held it to 14 GB/s on an
    // Intel Xeon whose DRAM gives twice that).
#pragma omp parallel reduction(+ : total)
    {
      float acc[128] = {};
#pragma omp for schedule(static)
      for (int64_t i = 0; i < n; i += 128)
        for (int k = 0; k < 128; ++k) acc[k] += buf[i + k];
      for (float a : acc) total += a;
    }
    const double t = seconds_since(t0);
    if (total < 0) std::abort();  // keeps the sum alive
    rates.push_back(static_cast<double>(n) * 4 / t * 1e-9);
  }
  return median(rates);
}

// Seconds to read `bytes` on every thread, plainly, from a 1 GiB buffer (allocated and touched on
// the first call, then kept), each call at the next offset so that no call finds the bytes of the
// last in a cache: a bound measured beside the step whose bound it is (bench_quant reads a decode
// step's bytes right after each step; this shared machine's bandwidth moved between 25 and 47 GB/s
// from one second to the next, so a bound taken minutes or seconds apart is not that step's).
inline double read_seconds(double bytes) {
  const int64_t size = int64_t{1} << 28;  // floats
  // 2 MB pages where the system has them, as tformer's weights (core/memory.h): the bound is the
  // best plain read, not one that pays a TLB miss each 4 KB.
  static const std::vector<float> buf = [] {
    std::vector<float> b;
    assign_on_huge_pages(b, static_cast<size_t>(size), 1.0f);
    return b;
  }();
  static int64_t offset = 0;
  // All `bytes` are read, in one parallel pass per stretch of the buffer up to its end (a step
  // reading more than 1 GiB wraps around it).
  int64_t left = std::max<int64_t>(256, static_cast<int64_t>(bytes / 4) / 256 * 256);
  double total = 0;
  const auto t0 = clock_type::now();
  while (left > 0) {
    if (offset >= size) offset = 0;
    const int64_t n = std::min(left, size - offset);
    const float* p = buf.data() + offset;
#pragma omp parallel reduction(+ : total)
    {
      float acc[128] = {};  // independent sums, as in read_bandwidth_gbs
#pragma omp for schedule(static)
      for (int64_t i = 0; i < n; i += 128)
        for (int k = 0; k < 128; ++k) acc[k] += p[i + k];
      for (float a : acc) total += a;
    }
    offset += n;
    left -= n;
  }
  const double t = seconds_since(t0);
  if (total < 0) std::abort();
  return t;
}

// main() of a Google Benchmark program, with OpenBLAS's build, OPENBLAS_CORETYPE and a note on
// the peak in the printed context.
inline int benchmark_main(int argc, char** argv, const char* peak_note) {
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  benchmark::AddCustomContext("openblas", blas_config());
  benchmark::AddCustomContext("OPENBLAS_CORETYPE", coretype ? coretype : "(unset)");
  benchmark::AddCustomContext("peak", peak_note);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace tformer::bench
