#include "core/hash.h"

#include <algorithm>

namespace tformer {

namespace {

constexpr uint64_t kPrime1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kPrime2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kPrime3 = 0x165667B19E3779F9ULL;
constexpr uint64_t kPrime4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t kPrime5 = 0x27D4EB2F165667C5ULL;

inline uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// Little-endian on every machine.
inline uint64_t load_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

inline uint64_t round64(uint64_t acc, uint64_t input) {
  acc += input * kPrime2;
  acc = rotl64(acc, 31);
  return acc * kPrime1;
}

}  // namespace

uint64_t hash64(std::string_view bytes, uint64_t seed) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  uint64_t h;
  if (n >= 32) {
    uint64_t v1 = seed + kPrime1 + kPrime2, v2 = seed + kPrime2, v3 = seed, v4 = seed - kPrime1;
    for (; i + 32 <= n; i += 32) {
      v1 = round64(v1, load_le64(p + i));
      v2 = round64(v2, load_le64(p + i + 8));
      v3 = round64(v3, load_le64(p + i + 16));
      v4 = round64(v4, load_le64(p + i + 24));
    }
    h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
    for (uint64_t v : {v1, v2, v3, v4}) h = (h ^ round64(0, v)) * kPrime1 + kPrime4;
  } else {
    h = seed + kPrime5;
  }
  h += n;
  for (; i + 8 <= n; i += 8) h = rotl64(h ^ round64(0, load_le64(p + i)), 27) * kPrime1 + kPrime4;
  for (; i < n; ++i) h = rotl64(h ^ (p[i] * kPrime5), 11) * kPrime1;
  h ^= h >> 33;
  h *= kPrime2;
  h ^= h >> 29;
  h *= kPrime3;
  h ^= h >> 32;
  return h;
}

void Hash64Stream::update(std::string_view bytes) {
  while (!bytes.empty()) {
    if (pending_.empty() && bytes.size() >= kBlock) {  // a whole block straight from the input
      h_ = hash64(bytes.substr(0, kBlock), h_);
      any_block_ = true;
      bytes.remove_prefix(kBlock);
      continue;
    }
    const size_t take = std::min(kBlock - pending_.size(), bytes.size());
    pending_.append(bytes.substr(0, take));
    bytes.remove_prefix(take);
    if (pending_.size() == kBlock) {
      h_ = hash64(pending_, h_);
      any_block_ = true;
      pending_.clear();
    }
  }
}

uint64_t Hash64Stream::finish() {
  if (!pending_.empty() || !any_block_) h_ = hash64(pending_, h_);
  pending_.clear();
  any_block_ = true;
  return h_;
}

}  // namespace tformer
