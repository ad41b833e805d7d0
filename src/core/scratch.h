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
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "core/aligned.h"

namespace tformer {

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
  static T* acquire(size_t slot, size_t n) {
    thread_local std::vector<std::vector<T, AlignedAllocator<T>>> slots;
    if (slots.size() <= slot) slots.resize(slot + 1);
    auto& b = slots[slot];
    if (b.size() < n) b.resize(n);
    return b.data();
  }

  T* data_;
  size_t n_;
};

}  // namespace tformer
