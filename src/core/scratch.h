// Per-thread scratch buffers that grow once and are then reused, so kernels called on every
// training step take their temporary tiles and row buffers without allocating: after the first
// call with the largest shape, a step allocates nothing.
//
//   ScratchBuffer<float> tile(0, 64 * 64);   // slot 0 of this thread: >= 4096 zeroed floats
//   tile[5] = 1; f(tile.data());
//
// A slot is a buffer of the calling thread; two live ScratchBuffers in one thread must use
// different slots (each kernel numbers its own from 0; kernels do not call each other while
// holding one). OpenMP pool threads live as long as the process, and so do their buffers.
//
// Which thread runs which task of a parallel loop changes from call to call (parallel_for lets a
// thread that is done take another's work), so a thread can meet a task, and the buffer it needs,
// for the first time long after warm-up. So sizes are shared: a slot grown inside a parallel
// region records its size, and share_scratch_sizes(), called where no buffer is live (the start
// of a training step or a forward), grows every pool thread's slots to the largest any thread has
// asked for. After the first step has run every kernel once, the later steps allocate nothing,
// whichever thread takes which task. (A slot grown outside a region, on the calling thread only,
// such as a batch's row buffer, is not shared: no other thread takes it.)
#pragma once

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "core/aligned.h"

namespace tformer {

namespace scratch_detail {
// The sizes shared between threads: each element type in use registers a function that grows the
// calling thread's slots to the recorded sizes; `grown` counts the times a recorded size rose.
struct Registry {
  std::mutex mu;
  std::vector<void (*)()> growers;  // under mu
  std::atomic<uint64_t> grown{0};
};
Registry& registry();
}  // namespace scratch_detail

// Grows every thread of the calling thread's pool to the largest size any thread has asked of
// each slot in a parallel region (forking the pool once), when one has grown since this thread's
// last call; else returns at once. Call it only where no ScratchBuffer is live on any thread.
void share_scratch_sizes();

template <typename T>
class ScratchBuffer {
 public:
  // Slot `slot` of this thread holding at least n elements, each set to `fill`.
  ScratchBuffer(size_t slot, size_t n, T fill = T(0)) : data_(acquire(slot, n)), n_(n) { std::fill_n(data_, n, fill); }
  // The same slot left as the last user left it (or zero when new): for a buffer that the caller
  // overwrites before reading, such as sgemm's packed panels, where filling would cost a pass.
  struct Unfilled {};
  ScratchBuffer(size_t slot, size_t n, Unfilled) : data_(acquire(slot, n)), n_(n) {}
  T* data() const { return data_; }
  size_t size() const { return n_; }
  T& operator[](size_t i) const { return data_[i]; }
  T* begin() const { return data_; }
  T* end() const { return data_ + n_; }

 private:
  using Slots = std::vector<std::vector<T, AlignedAllocator<T>>>;
  static Slots& mine() {
    thread_local Slots slots;
    return slots;
  }
  static std::vector<size_t>& shared_sizes() {  // under registry().mu
    static std::vector<size_t> sizes;
    return sizes;
  }
  static T* acquire(size_t slot, size_t n) {
    Slots& slots = mine();
    if (slots.size() <= slot) slots.resize(slot + 1);
    auto& b = slots[slot];
    if (b.size() < n) {
      b.resize(n);
      if (omp_in_parallel()) record(slot, n);
    }
    return b.data();
  }
  static void record(size_t slot, size_t n) {
    scratch_detail::Registry& r = scratch_detail::registry();
    const std::lock_guard lock(r.mu);
    static bool registered = false;
    if (!registered) r.growers.push_back(&grow_to_shared);
    registered = true;
    std::vector<size_t>& sizes = shared_sizes();
    if (sizes.size() <= slot) sizes.resize(slot + 1);
    if (n > sizes[slot]) {
      sizes[slot] = n;
      r.grown.fetch_add(1, std::memory_order_release);
    }
  }
  static void grow_to_shared() {  // under registry().mu
    const std::vector<size_t>& sizes = shared_sizes();
    Slots& slots = mine();
    if (slots.size() < sizes.size()) slots.resize(sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i)
      if (slots[i].size() < sizes[i]) slots[i].resize(sizes[i]);
  }

  T* data_;
  size_t n_;
};

}  // namespace tformer
