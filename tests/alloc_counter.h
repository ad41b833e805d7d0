// Counts every operator new of the test executable that includes it, so a test can show that a
// call allocates nothing:  const int64_t before = g_allocations.load(); f(); EXPECT_EQ(..., before).
// Replaces the global operator new/delete: include it in exactly one translation unit (each test
// executable here is one .cpp file).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

// Under AddressSanitizer the replacement is left out: ASan's own operator new serves some
// allocations made inside shared libraries, and freeing those through a replaced delete is reported
// as an alloc-dealloc mismatch. Tests that count check kCountingAllocations and skip.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kCountingAllocations = false;
namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace
#else
inline constexpr bool kCountingAllocations = true;
namespace {
std::atomic<int64_t> g_allocations{0};
void* counted_alloc(std::size_t n, std::size_t align) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = 1;
  void* p = nullptr;
  if (posix_memalign(&p, std::max(align, sizeof(void*)), n) != 0) throw std::bad_alloc();
  return p;
}
}  // namespace

// noinline: inlined into a caller, the free() below would meet the pointer operator new returned
// and GCC's -Wmismatched-new-delete would (wrongly) object.
[[gnu::noinline]] void* operator new(std::size_t n) { return counted_alloc(n, alignof(std::max_align_t)); }
[[gnu::noinline]] void* operator new[](std::size_t n) { return counted_alloc(n, alignof(std::max_align_t)); }
[[gnu::noinline]] void* operator new(std::size_t n, std::align_val_t a) {
  return counted_alloc(n, static_cast<std::size_t>(a));
}
[[gnu::noinline]] void* operator new[](std::size_t n, std::align_val_t a) {
  return counted_alloc(n, static_cast<std::size_t>(a));
}
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
#endif  // __SANITIZE_ADDRESS__
