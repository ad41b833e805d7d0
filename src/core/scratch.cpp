#include "core/scratch.h"

#include "core/threads.h"

namespace tformer {

scratch_detail::Registry& scratch_detail::registry() {
  static Registry r;
  return r;
}

void share_scratch_sizes() {
  static std::atomic<uint64_t> shared{0};  // the count of growths the last call shared
  scratch_detail::Registry& r = scratch_detail::registry();
  const uint64_t grown = r.grown.load(std::memory_order_acquire);
  if (grown == shared.load(std::memory_order_relaxed)) return;
  parallel_region(true, [&] {
    const std::lock_guard lock(r.mu);
    for (void (*grow)() : r.growers) grow();
  });
  shared.store(grown, std::memory_order_relaxed);
}

}  // namespace tformer
