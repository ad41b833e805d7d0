// The plain-program half of a fuzz target (fuzz/fuzz_util.h): runs LLVMFuzzerTestOneInput on
// every file named, or on every file in every folder named (but a README.md; a folder after
// --optional may be missing), in name order, and prints how many.
// A bug aborts (the file it was on is printed first), so `make test` fails on a regression input;
// so does a single allocation above the fuzzers' 512 MiB limit.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <new>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

// The single-allocation limit of `make fuzz` (-malloc_limit_mb=512, scripts/fuzz.sh), kept here
// too, so that a regression input of an oversized allocation (a length field trusted before it
// was checked) fails the replay rather than merely costing memory.
namespace {
constexpr size_t kMallocLimit = size_t{512} << 20;
void* limited_alloc(size_t n) {
  if (n > kMallocLimit) {
    std::fprintf(stderr, "replay: an allocation of %zu bytes, above the fuzzers' limit of 512 MiB\n", n);
    std::abort();
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(size_t n) { return limited_alloc(n); }
void* operator new[](size_t n) { return limited_alloc(n); }
// The nothrow forms too (std::stable_sort's buffer): else they stay the runtime's, and their
// memory reaches the free() below, which AddressSanitizer reports as a mismatch.
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  try {
    return limited_alloc(n);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

int main(int argc, char** argv) {
  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i) {
    // --optional DIR: a folder that may not exist yet (git keeps no empty folder).
    const bool optional = std::string(argv[i]) == "--optional" && i + 1 < argc;
    if (optional) ++i;
    const std::filesystem::path p(argv[i]);
    if (optional && !std::filesystem::exists(p)) continue;
    if (std::filesystem::is_directory(p)) {
      for (const auto& e : std::filesystem::directory_iterator(p))
        if (e.is_regular_file() && e.path().filename() != "README.md") files.push_back(e.path());
    } else if (std::filesystem::is_regular_file(p)) {
      files.push_back(p);
    } else {
      std::fprintf(stderr, "%s: no such file or folder\n", argv[i]);
      return 2;
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "no inputs to replay\n");
    return 2;
  }
  for (const auto& f : files) {
    std::fprintf(stderr, "%s\n", f.c_str());
    std::ifstream in(f, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("replayed %zu inputs\n", files.size());
  return 0;
}
