// Element-wise fills, copies and sums over flat arrays, in parallel only where an array is large
// enough to pay for waking the threads. Each element is written once by one thread: the results
// do not depend on the thread count.
#pragma once

#include <cstdint>

#include "core/threads.h"

namespace tformer {

inline constexpr int64_t kElementwiseParallelMin = int64_t(1) << 15;

template <typename T>
void zero(T* x, int64_t n) {
  parallel_for(n, n >= kElementwiseParallelMin, [&](int64_t i) { x[i] = T(0); });
}

template <typename T>
void copy(T* y, const T* x, int64_t n) {
  parallel_for(n, n >= kElementwiseParallelMin, [&](int64_t i) { y[i] = x[i]; });
}

// y = a + b; y may alias a or b.
template <typename T>
void add(T* y, const T* a, const T* b, int64_t n) {
  parallel_for(n, n >= kElementwiseParallelMin, [&](int64_t i) { y[i] = a[i] + b[i]; });
}

}  // namespace tformer
