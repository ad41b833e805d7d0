// One thread pool: OpenMP's. OpenBLAS is Debian's OpenMP build, so its sgemm runs on the same
// threads as our loops; set_num_threads sets both.
//
// Our loops go through parallel_for / parallel_region below rather than through a bare
// `#pragma omp parallel ... if (...)`: libgomp allocates (and frees) a team for every parallel
// region that runs on one thread, whether an `if` clause turned it off or the pool has one
// thread, so a region skipped in C++ instead keeps a decode step free of heap allocations. Loops
// are split statically; each element is computed by one thread, so results do not depend on the
// split.
#pragma once

#include <omp.h>

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

// body(i) for i in [0, n): split statically over the pool when `enough` (and the pool has more
// than one thread), else a plain loop on the calling thread.
template <typename F>
void parallel_for(int64_t n, bool enough, F&& body) {
  if (fork_pool(enough)) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) body(i);
  } else {
    for (int64_t i = 0; i < n; ++i) body(i);
  }
}

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

// OpenBLAS's build description (core type, threading model), for logs and the threading test.
std::string blas_config();
// 0 = sequential, 1 = pthreads, 2 = OpenMP (OpenBLAS's openblas_get_parallel()).
int blas_parallel_model();

}  // namespace tformer
