// The project's hash functions, one of each kind; none is cryptographic.
//
//   mix64   a bijective mixer of 64-bit words (splitmix64's output function): hash-table slots
//           for integer keys, seeds derived from seeds, counter-based random numbers
//   hash64  bytes -> 64 bits (four lanes of xxHash64's round, then xxHash64's final mix): hash
//           tables keyed by strings, and the token cache's keys and checksums, which are stored in
//           files, so its values never change (tests pin them)
//
// Both give the same values on every machine and compiler.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tformer {

inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t hash64(std::string_view bytes, uint64_t seed = 0);

// hash64 of a byte stream fed in any pieces, for data too large to hold at once: the stream is cut
// into blocks of kBlock bytes (the last may be shorter; an empty stream is one empty block), and
// h = seed, then h = hash64(block, h) for each block in order. The value depends only on the bytes
// and the seed, never on how update() was called (tests pin it).
class Hash64Stream {
 public:
  static constexpr size_t kBlock = size_t{1} << 20;
  explicit Hash64Stream(uint64_t seed = 0) : h_(seed) {}
  void update(std::string_view bytes);
  uint64_t finish();  // once

 private:
  uint64_t h_;
  std::string pending_;
  bool any_block_ = false;
};

}  // namespace tformer
