#include "core/scratch.h"

#include "core/threads.h"

namespace tformer {

scratch_detail::Registry& scratch_detail::registry() {
  static Registry r;
  return r;
}

void share_scratch_sizes() {
  // The count of growths this thread's last call shared: per calling thread, because each thread
  // that opens parallel regions has a pool of its own (the server's loop thread, the main thread).
  thread_local uint64_t shared = 0;
  scratch_detail::Registry& r = scratch_detail::registry();
  const uint64_t grown = r.grown.load(std::memory_order_acquire);
  if (grown == shared) return;
  parallel_region(true, [&] {
    const std::lock_guard lock(r.mu);
    for (void (*grow)() : r.growers) grow();
  });
  shared = grown;
}

}  // namespace tformer
