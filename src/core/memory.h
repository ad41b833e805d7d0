// How much memory this process may still take, for refusing a model before allocating it; and
// the advice that a large buffer be backed by 2 MB pages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <type_traits>
#include <utility>

namespace tformer {

// $TFORMER_MEMORY_LIMIT (bytes) when set (tests use it); else MemAvailable from /proc/meminfo;
// else the physical memory sysconf reports; else UINT64_MAX.
uint64_t available_memory_bytes();

// Asks the kernel to back [p, p + bytes) with transparent huge pages (2 MB) where it can: the
// 2 MB-aligned part of the range, advised with madvise(MADV_HUGEPAGE), which takes effect for
// pages first touched after the call (so call it on fresh memory, before writing it). Decode
// reads every weight once a token; with 4 KB pages each 4 KB costs a TLB miss (a 110M Q4_0 file
// is 15,000 pages a token), and a plain read of 64 MB ran at 27-48 GB/s with them against
// 36-58 GB/s with 2 MB pages on a Zen 4. Does nothing where the system has no such pages (or
// this is not Linux); never fails.
void advise_huge_pages(void* p, std::size_t bytes);

// A vector's room for n elements (reserve) advised for 2 MB pages before anything touches it; and
// its n elements set to `value` in such room (the arenas, the KV cache, the stored weights).
template <typename Vec>
void reserve_on_huge_pages(Vec& v, std::size_t n) {
  v.reserve(n);
  advise_huge_pages(v.data(), n * sizeof(typename Vec::value_type));
}
template <typename Vec>
void assign_on_huge_pages(Vec& v, std::size_t n, const typename Vec::value_type& value) {
  reserve_on_huge_pages(v, n);
  v.assign(n, value);
}

// Memory straight from the system's fresh pages (mmap: zero-filled, page-aligned) and its return
// (munmap); std::bad_alloc when the system refuses. Until written, such pages cost no memory.
void* allocate_zeroed_pages(std::size_t bytes);
void free_zeroed_pages(void* p, std::size_t bytes) noexcept;

// An allocator of such memory whose value-initialising construct writes nothing (the pages are
// zero already): a vector of it resized to n holds n zeros that cost no memory until written (the
// arenas: a model's float copy of a matrix it keeps stored is never touched by an inference-only
// load). Trivial element types only, whose zero is all zero bits.
template <typename T>
struct ZeroedPagesAllocator {
  static_assert(std::is_trivially_copyable_v<T> && std::is_arithmetic_v<T>, "arithmetic elements only");
  using value_type = T;
  ZeroedPagesAllocator() = default;
  template <typename U>
  ZeroedPagesAllocator(const ZeroedPagesAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(allocate_zeroed_pages(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { free_zeroed_pages(p, n * sizeof(T)); }
  template <typename U>
  void construct(U* /*p*/) noexcept {}  // value-initialised: zero, as the fresh page is
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <typename U>
  bool operator==(const ZeroedPagesAllocator<U>&) const noexcept {
    return true;
  }
};

// Gives the pages wholly inside [p, p + bytes) back to the system (madvise(MADV_DONTNEED)): they
// stop counting towards the process's memory, and read as zeros if touched again. For buffers that
// will not be read again (BasicModel::release_float_copies). Does nothing off Linux; never fails.
void release_pages(void* p, std::size_t bytes);

}  // namespace tformer
