#include "kernels/dropout.h"

#include "core/rng.h"
#include "core/threads.h"

namespace tformer {

DropoutMask DropoutMask::with_probability(uint64_t key, double p) {
  if (!(p > 0)) return {};
  return {key, dropout_threshold(p), 1.0 / (1.0 - p)};
}

template <typename T>
void dropout_apply(T* x, int64_t n, const DropoutMask& mask) {
  if (!mask.active()) return;
  const T scale = static_cast<T>(mask.scale);
  parallel_for(n, n >= (1 << 15), [&](int64_t i) {
    x[i] = dropout_kept(mask.key, static_cast<uint64_t>(i), mask.threshold) ? x[i] * scale : T(0);
  });
}

template void dropout_apply<float>(float*, int64_t, const DropoutMask&);
template void dropout_apply<double>(double*, int64_t, const DropoutMask&);

}  // namespace tformer
