// Attention: the tiled kernel (kernels/flash_attention.h) against the reference (kernels/
// attention.h), batch 1, 8 heads, head width 64, causal self-attention, 2 threads.
//
//   build/bench/bench_attention                 (bench/attention.sh adds PyTorch and the ratios)
//
// Counters:
//   GFLOPs      useful FLOPs per second: causal attention has N(N+1)/2 allowed (query, key) pairs
//               per head; forward = 2 products (QK^T, PV) = 4 hd FLOPs per pair; backward = 5
//               products (S again, dP, dV, dQ, dK) = 10 hd per pair, so forward+backward = 14 hd per
//               pair (the tiled backward does 7 products, recomputing S and dP in its dQ pass; the
//               count stays the 5 useful ones, as for the reference).
//   frac_sgemm  GFLOPs over the sgemm rate (n = 1024, 2 threads) measured in the same run: the
//               FLOP-bound estimate of an attention at that rate is frac_sgemm = 1.
//   extra_bytes peak memory the kernel allocates beyond its inputs, outputs and gradients:
//               reference: the probabilities B*H*N*N*4 plus its per-thread double rows/accumulators;
//               tiled: lse B*H*N*4 plus its per-thread tiles (flash_attention_workspace_bytes).
//
// Sizes. Tiled: N = 1k, 4k, 16k (forward and forward+backward). 32k is not timed: causal
// forward+backward at 32k is ~4 x 16k (~a minute of this 2-core VM per repetition); its memory is
// reported by BM_ExtraMemory, which runs nothing. Reference: N = 1k and 4k; at 16k its P buffer is
// 8 x 16k x 16k x 4 B = 8 GiB (32 GiB at 32k), over the ~2 GB this benchmark allows, so skipped.
// Decode: one new token over a cache of 1k, 8k, 32k tokens ([B, H, capacity, hd] layout).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "core/rng.h"
#include "core/threads.h"
#include "kernels/attention.h"
#include "kernels/flash_attention.h"
#include "kernels/matmul.h"

namespace tformer {
namespace {

constexpr int64_t kH = 8, kHd = 64;
constexpr int kThreads = 2;

std::vector<float> random_floats(int64_t n, uint64_t stream) {
  std::vector<float> v(static_cast<size_t>(n));
  fill_uniform<float>(TensorView<float>(v.data(), {n}), 4321, stream, -1.0, 1.0);
  return v;
}

// sgemm GFLOP/s at n = 1024 with kThreads threads, best of 3 after a warm-up; measured once.
double sgemm_gflops() {
  static double rate = [] {
    set_num_threads(kThreads);
    const int64_t n = 1024;
    const auto A = random_floats(n * n, 1), B = random_floats(n * n, 2);
    std::vector<float> C(static_cast<size_t>(n * n));
    double best = 0;
    for (int rep = 0; rep < 4; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      gemm<float>(C.data(), n, A.data(), n, false, B.data(), n, false, n, n, n);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (rep > 0) best = std::max(best, 2.0 * n * n * n / s * 1e-9);
    }
    return best;
  }();
  return rate;
}

double causal_pairs(int64_t N) { return static_cast<double>(N) * static_cast<double>(N + 1) / 2.0; }

int64_t reference_extra_bytes(int64_t N, bool backward) {
  const int64_t probs = kH * N * N * 4;
  const int64_t fwd = kThreads * (N + kHd) * 8;
  const int64_t bwd = kThreads * (2 * N * kHd + N + kHd) * 8;
  return probs + (backward ? std::max(fwd, bwd) : fwd);
}

int64_t flash_extra_bytes(int64_t n_q, int64_t n_kv, bool backward) {
  const AttentionShape s{1, n_q, n_kv, kH, kH, kHd};
  int64_t ws = flash_attention_workspace_bytes(s, 4, kThreads, false);
  if (backward) ws = std::max(ws, flash_attention_workspace_bytes(s, 4, kThreads, true));
  return kH * n_q * 4 + ws;
}

struct Inputs {
  int64_t N;
  std::vector<float> q, k, v, dout, out, dq, dk, dv;
  explicit Inputs(int64_t n)
      : N(n),
        q(random_floats(n * kH * kHd, 11)),
        k(random_floats(n * kH * kHd, 12)),
        v(random_floats(n * kH * kHd, 13)),
        dout(random_floats(n * kH * kHd, 14)),
        out(q.size()),
        dq(q.size()),
        dk(q.size()),
        dv(q.size()) {}
  HeadsView<float> view(std::vector<float>& x) { return heads_btHd(x.data(), N, kH, kHd); }
  HeadsView<const float> cview(const std::vector<float>& x) const { return heads_btHd(x.data(), N, kH, kHd); }
};

void report(benchmark::State& state, int64_t N, bool backward, double seconds, int64_t bytes) {
  const double flops = (backward ? 14.0 : 4.0) * kHd * kH * causal_pairs(N) * static_cast<double>(state.iterations());
  const double g = flops / seconds * 1e-9;
  state.counters["GFLOPs"] = g;
  state.counters["frac_sgemm"] = g / sgemm_gflops();
  state.counters["extra_bytes"] = static_cast<double>(bytes);
}

// range(0) = N, range(1) = 1 for forward+backward.
void BM_FlashAttention(benchmark::State& state) {
  const int64_t N = state.range(0);
  const bool backward = state.range(1) != 0;
  sgemm_gflops();
  set_num_threads(kThreads);
  Inputs in(N);
  const AttentionShape s{1, N, N, kH, kH, kHd};
  AttentionMask m;
  std::vector<float> lse(static_cast<size_t>(kH * N));
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    flash_attention_forward<float>(in.view(in.out), lse.data(), in.cview(in.q), in.cview(in.k), in.cview(in.v), s, m);
    if (backward)
      flash_attention_backward<float>(in.view(in.dq), in.view(in.dk), in.view(in.dv), in.cview(in.dout),
                                      in.cview(in.out), lse.data(), in.cview(in.q), in.cview(in.k), in.cview(in.v), s,
                                      m);
    benchmark::DoNotOptimize(in.out.data());
    benchmark::DoNotOptimize(in.dq.data());
  }
  report(state, N, backward, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
         flash_extra_bytes(N, N, backward));
}
BENCHMARK(BM_FlashAttention)
    ->Args({1024, 0})
    ->Args({1024, 1})
    ->Args({4096, 0})
    ->Args({4096, 1})
    ->ArgNames({"N", "bwd"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_FlashAttention)
    ->Args({16384, 0})
    ->Args({16384, 1})
    ->ArgNames({"N", "bwd"})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_ReferenceAttention(benchmark::State& state) {
  const int64_t N = state.range(0);
  const bool backward = state.range(1) != 0;
  sgemm_gflops();
  set_num_threads(kThreads);
  Inputs in(N);
  const AttentionShape s{1, N, N, kH, kH, kHd};
  AttentionMask m;
  std::vector<float> probs(static_cast<size_t>(kH * N * N));
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    attention_forward<float>(in.view(in.out), probs.data(), in.cview(in.q), in.cview(in.k), in.cview(in.v), s, m);
    if (backward)
      attention_backward<float>(in.view(in.dq), in.view(in.dk), in.view(in.dv), in.cview(in.dout), probs.data(),
                                in.cview(in.q), in.cview(in.k), in.cview(in.v), s, m);
    benchmark::DoNotOptimize(in.out.data());
    benchmark::DoNotOptimize(in.dq.data());
  }
  report(state, N, backward, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
         reference_extra_bytes(N, backward));
}
BENCHMARK(BM_ReferenceAttention)
    ->Args({1024, 0})
    ->Args({1024, 1})
    ->ArgNames({"N", "bwd"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_ReferenceAttention)
    ->Args({4096, 0})
    ->Args({4096, 1})
    ->ArgNames({"N", "bwd"})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Peak extra bytes of one forward+backward at every N (runs no attention): tiled grows linearly,
// the reference quadratically.
void BM_ExtraMemory(benchmark::State& state) {
  const int64_t N = state.range(0);
  for (auto _ : state) benchmark::DoNotOptimize(N);
  state.counters["tiled_bytes"] = static_cast<double>(flash_extra_bytes(N, N, true));
  state.counters["reference_bytes"] = static_cast<double>(reference_extra_bytes(N, true));
}
BENCHMARK(BM_ExtraMemory)->Arg(1024)->Arg(4096)->Arg(16384)->Arg(32768)->ArgName("N")->Iterations(1);

// One decode step: a single new query row per head over a cache of `cache` tokens laid out
// [B, H, capacity, hd] (capacity = cache), q_offset = cache - 1. range(1) = 1: the reference.
void BM_Decode(benchmark::State& state) {
  const int64_t cache = state.range(0);
  const bool reference = state.range(1) != 0;
  set_num_threads(kThreads);
  const auto q = random_floats(kH * kHd, 21), k = random_floats(kH * cache * kHd, 22),
             v = random_floats(kH * cache * kHd, 23);
  std::vector<float> out(q.size()), lse(kH), probs(static_cast<size_t>(kH * cache));
  const AttentionShape s{1, 1, cache, kH, kH, kHd};
  const int64_t off = cache - 1;
  AttentionMask m;
  m.q_offset = &off;
  const auto qv = heads_btHd(q.data(), 1, kH, kHd);
  const auto kv = heads_bHTd(k.data(), cache, kH, kHd), vv = heads_bHTd(v.data(), cache, kH, kHd);
  for (auto _ : state) {
    if (reference)
      attention_forward<float>(heads_btHd(out.data(), 1, kH, kHd), probs.data(), qv, kv, vv, s, m);
    else
      flash_attention_forward<float>(heads_btHd(out.data(), 1, kH, kHd), lse.data(), qv, kv, vv, s, m);
    benchmark::DoNotOptimize(out.data());
  }
  // K and V bytes read per step: the decode step is bound by memory bandwidth.
  state.counters["kv_GBps"] =
      benchmark::Counter(2.0 * kH * cache * kHd * 4 * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Decode)
    ->ArgsProduct({{1024, 8192, 32768}, {0, 1}})
    ->ArgNames({"cache", "ref"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void BM_SgemmRate(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(sgemm_gflops());
  state.counters["GFLOPs"] = sgemm_gflops();
}
BENCHMARK(BM_SgemmRate)->Iterations(1);

}  // namespace
}  // namespace tformer

BENCHMARK_MAIN();
