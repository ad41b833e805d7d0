// A std::allocator replacement that returns 64-byte aligned memory (one cache line, one AVX-512
// register), so every buffer's first element starts a vector load.
#pragma once

#include <cstddef>
#include <new>

namespace tformer {

inline constexpr std::size_t kAlignment = 64;

template <typename T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U>&) {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(kAlignment))); }
  void deallocate(T* p, std::size_t) { ::operator delete(p, std::align_val_t(kAlignment)); }
  template <typename U>
  bool operator==(const AlignedAllocator<U>&) const {
    return true;
  }
};

}  // namespace tformer
