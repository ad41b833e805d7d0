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

#include <cstdint>
#include <string_view>

namespace tformer {

inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t hash64(std::string_view bytes, uint64_t seed = 0);

}  // namespace tformer
