// Counts every heap allocation of the test executable that includes it, at the malloc level:
// malloc, calloc, realloc and the aligned forms, whoever calls them (operator new, C code,
// OpenBLAS, libgomp, glibc itself), so a test can show that a call allocates nothing:
//   const int64_t before = g_allocations.load(); f(); EXPECT_EQ(g_allocations.load() - before, 0);
// The functions replace glibc's (which supports replacing its allocator this way) and forward to
// glibc's own __libc_* entry points. Include it in exactly one translation unit (each test
// executable here is one .cpp file).
#pragma once

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>

// Under AddressSanitizer the replacement is left out: ASan owns the allocator. Tests that count
// check kCountingAllocations and skip with a message.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kCountingAllocations = false;
namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace
#else
inline constexpr bool kCountingAllocations = true;
inline std::atomic<int64_t> g_allocations{0};

extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void __libc_free(void*);

inline void count_allocation() { g_allocations.fetch_add(1, std::memory_order_relaxed); }

void* malloc(std::size_t n) noexcept {
  count_allocation();
  return __libc_malloc(n);
}
void* calloc(std::size_t count, std::size_t n) noexcept {
  count_allocation();
  return __libc_calloc(count, n);
}
void* realloc(void* p, std::size_t n) noexcept {
  count_allocation();
  return __libc_realloc(p, n);
}
void free(void* p) noexcept { __libc_free(p); }
void* memalign(std::size_t align, std::size_t n) noexcept {
  count_allocation();
  return __libc_memalign(align, n);
}
void* aligned_alloc(std::size_t align, std::size_t n) noexcept {
  count_allocation();
  return __libc_memalign(align, n);
}
int posix_memalign(void** out, std::size_t align, std::size_t n) noexcept {
  if (align < sizeof(void*) || (align & (align - 1)) != 0) return EINVAL;
  count_allocation();
  void* p = __libc_memalign(align, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
void* valloc(std::size_t n) noexcept {
  count_allocation();
  return __libc_memalign(4096, n);
}
}  // extern "C"
#endif  // __SANITIZE_ADDRESS__
