#include "core/memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <new>
#include <string>

namespace tformer {

namespace {

bool parse_u64(const char* s, uint64_t& out) {
  const char* end = s + std::strlen(s);
  const auto [p, ec] = std::from_chars(s, end, out);
  return ec == std::errc() && p == end && p != s;
}

}  // namespace

uint64_t available_memory_bytes() {
  if (const char* limit = std::getenv("TFORMER_MEMORY_LIMIT")) {
    uint64_t v = 0;
    if (parse_u64(limit, v)) return v;
  }
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (meminfo >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  return std::numeric_limits<uint64_t>::max();
}

namespace {

// madvise(advice) over the whole `unit`-sized, unit-aligned stretches inside [p, p + bytes).
[[maybe_unused]] void advise_whole_units(void* p, std::size_t bytes, std::uintptr_t unit, int advice) {
  const auto begin = reinterpret_cast<std::uintptr_t>(p), end = begin + bytes;
  const std::uintptr_t first = (begin + unit - 1) / unit * unit, last = end / unit * unit;
  if (p != nullptr && last > first) (void)::madvise(static_cast<char*>(p) + (first - begin), last - first, advice);
}

}  // namespace

void advise_huge_pages(void* p, std::size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  advise_whole_units(p, bytes, std::uintptr_t{2} << 20, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

void* allocate_zeroed_pages(std::size_t bytes) {
  if (bytes == 0) bytes = 1;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return p;
}

void free_zeroed_pages(void* p, std::size_t bytes) noexcept {
  if (p != nullptr) (void)::munmap(p, bytes == 0 ? 1 : bytes);
}

void release_pages(void* p, std::size_t bytes) {
#if defined(__linux__)
  advise_whole_units(p, bytes, static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE)), MADV_DONTNEED);
#else
  (void)p;
  (void)bytes;
#endif
}

}  // namespace tformer
