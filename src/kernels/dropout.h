// Dropout with counter-based masks: element i of a tensor is kept iff
// dropout_kept(key, i, threshold) (core/rng.h), a pure function of the key and the index, so a
// backward pass regenerates the mask instead of storing it and the result does not depend on the
// thread count. A kept element is scaled by 1 / (1 - p).
#pragma once

#include <cstdint>

namespace tformer {

struct DropoutMask {
  uint64_t key = 0;
  uint64_t threshold = 0;  // 0 = off (nothing dropped, nothing scaled)
  double scale = 1.0;      // 1 / (1 - p)
  bool active() const { return threshold > 0; }
  // The mask of drop probability p in [0, 1) under `key` (p = 0: inactive).
  static DropoutMask with_probability(uint64_t key, double p);
};

// x[i] = kept(i) ? x[i] * scale : 0, in place, for i in [0, n). The same call is its own backward:
// applied to the gradient of the output it gives the gradient of the input.
template <typename T>
void dropout_apply(T* x, int64_t n, const DropoutMask& mask);

}  // namespace tformer
