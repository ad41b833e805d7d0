// One thread pool: OpenMP's. OpenBLAS is Debian's OpenMP build, so its sgemm runs on the same
// threads as our loops; set_num_threads sets both.
//
// Our loops go through parallel_for / parallel_region below rather than through a bare
// `#pragma omp parallel ... if (...)`: libgomp allocates (and frees) a team for every parallel
// region that runs on one thread, whether an `if` clause turned it off or the pool has one
// thread, so a region skipped in C++ instead keeps a decode step free of heap allocations. Each
// element of a loop is computed by one thread, whole, so results do not depend on how a loop is
// split: parallel_for splits it statically and lets a thread done with its share take what another
// has not reached (StealShares), for_static / for_dynamic as OpenMP's schedules do.
#pragma once

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>

namespace tformer {

// n <= 0 means "all cores". Applies to our OpenMP loops and to OpenBLAS.
void set_num_threads(int n);
inline int num_threads() { return omp_get_max_threads(); }

// True when a region with this much work should fork the pool: `enough` and more than one thread.
inline bool fork_pool(bool enough) { return enough && omp_get_max_threads() > 1; }

// body() once on every thread of the pool when `enough`, else once on the calling thread. Inside
// it, for_static / for_dynamic divide a loop among the threads (or run it whole when serial).
template <typename F>
void parallel_region(bool enough, F&& body) {
  if (fork_pool(enough)) {
#pragma omp parallel
    body();
  } else {
    body();
  }
}

// Within parallel_region: iterations [0, n) split statically (contiguous blocks) or dynamically
// (one at a time, for uneven iterations) over the team, with the barrier at the end; on the
// calling thread alone, a plain loop.
template <typename F>
void for_static(int64_t n, F&& body) {
  if (omp_in_parallel()) {
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) body(i);
  } else {
    for (int64_t i = 0; i < n; ++i) body(i);
  }
}
template <typename F>
void for_dynamic(int64_t n, F&& body) {
  if (omp_in_parallel()) {
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n; ++i) body(i);
  } else {
    for (int64_t i = 0; i < n; ++i) body(i);
  }
}
// body(i) for i in [0, n), handed out one at a time over the pool when `enough` (uneven
// iterations, such as a sampler each), else a plain loop. An exception may not leave an OpenMP
// region (std::terminate): the first one an iteration throws is kept and rethrown on the calling
// thread once the loop is over (the other iterations still run).
template <typename F>
void parallel_for_dynamic(int64_t n, bool enough, F&& body) {
  std::exception_ptr failed;
  std::mutex failed_mu;
  parallel_region(enough, [&] {
    for_dynamic(n, [&](int64_t i) {
      try {
        body(i);
      } catch (...) {
        const std::lock_guard lock(failed_mu);
        if (!failed) failed = std::current_exception();
      }
    });
  });
  if (failed) std::rethrow_exception(failed);
}

// parallel_for's schedule: each thread starts on its own contiguous share of [0, n), as a static
// split gives it, and takes it from the front in grains; a thread whose share is done takes
// grains from the back of the others' (a share is one 64-bit word, front and back, on its own
// cache line, moved by compare-and-swap). A thread the system has taken off its core (the server's
// HTTP threads and its clients share the cores) then holds up the others by at most one grain,
// where a static split left them waiting at the closing barrier for its whole share; a thread
// that keeps its core still reads its share front to back, one sequential stream.
struct StealShares {
  static constexpr int kMaxThreads = 64;
  struct alignas(64) Share {
    std::atomic<uint64_t> range;  // front in the low 32 bits, back in the high 32
    int64_t grain;
  };
  Share share[kMaxThreads];
  int threads = 0;

  static uint64_t pack(int64_t front, int64_t back) {
    return static_cast<uint64_t>(front) | static_cast<uint64_t>(back) << 32;
  }
  void split(int64_t n, int t) {
    threads = t;
    for (int i = 0; i < t; ++i) {
      const int64_t a = n * i / t, b = n * (i + 1) / t;
      share[i].range.store(pack(a, b), std::memory_order_relaxed);
      share[i].grain = std::max<int64_t>(1, (b - a) / 16);
    }
  }
  // [first, last) taken from share s's front (own) or back (stolen); false when it is empty.
  bool take(int s, bool front, int64_t& first, int64_t& last) {
    Share& sh = share[s];
    uint64_t r = sh.range.load(std::memory_order_relaxed);
    for (;;) {
      const int64_t a = static_cast<int64_t>(r & 0xffffffffu), b = static_cast<int64_t>(r >> 32);
      if (a >= b) return false;
      const int64_t g = std::min(sh.grain, b - a);
      const uint64_t next = front ? pack(a + g, b) : pack(a, b - g);
      if (sh.range.compare_exchange_weak(r, next, std::memory_order_acq_rel, std::memory_order_relaxed)) {
        first = front ? a : b - g;
        last = front ? a + g : b;
        return true;
      }
    }
  }
  template <typename F>
  void run(int me, F&& body) {
    int64_t first, last;
    while (take(me, true, first, last))
      for (int64_t i = first; i < last; ++i) body(i);
    for (int k = 1; k < threads; ++k) {
      const int victim = (me + k) % threads;
      while (take(victim, false, first, last))
        for (int64_t i = first; i < last; ++i) body(i);
    }
  }
};

// body(i) for i in [0, n): split over the pool when `enough` (and the pool has more than one
// thread), each thread its own share first, then what the others have not reached (StealShares);
// else a plain loop on the calling thread. Each i runs once, on one thread.
template <typename F>
void parallel_for(int64_t n, bool enough, F&& body) {
  const int t = omp_get_max_threads();
  if (fork_pool(enough) && n < (int64_t{1} << 31) && t <= StealShares::kMaxThreads) {
    StealShares shares;
    shares.split(n, t);
#pragma omp parallel num_threads(t)
    shares.run(omp_get_thread_num(), body);
  } else if (fork_pool(enough)) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) body(i);
  } else {
    for (int64_t i = 0; i < n; ++i) body(i);
  }
}

// OpenBLAS's build description (core type, threading model), for logs and the threading test.
std::string blas_config();
// 0 = sequential, 1 = pthreads, 2 = OpenMP (OpenBLAS's openblas_get_parallel()).
int blas_parallel_model();

}  // namespace tformer
