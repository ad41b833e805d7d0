// Internal to the byte-level BPE tokenizer (byte_bpe*.cpp): the hash tables built from the merges
// once, at construction, and read by every encode: whole pieces -> id, and (left id, right id) ->
// the id of their concatenation.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/hash.h"
#include "core/types.h"
#include "tokenizer/byte_bpe.h"

namespace tformer {

// Open addressing, linear probing: (left id, right id) -> id of their concatenation.
class PairTable {
 public:
  void build(const std::vector<std::pair<uint64_t, TokenId>>& entries) {
    size_t cap = 16;
    while (cap < entries.size() * 2) cap *= 2;
    keys_.assign(cap, kEmpty);
    values_.assign(cap, -1);
    mask_ = cap - 1;
    for (const auto& [key, value] : entries) {
      size_t h = slot(key);
      while (keys_[h] != kEmpty && keys_[h] != key) h = (h + 1) & mask_;
      keys_[h] = key;
      values_[h] = value;
    }
  }
  // The merged id, or -1.
  TokenId find(TokenId left, TokenId right) const {
    const uint64_t key = pack(left, right);
    size_t h = slot(key);
    while (true) {
      const uint64_t k = keys_[h];
      if (k == key) return values_[h];
      if (k == kEmpty) return -1;
      h = (h + 1) & mask_;
    }
  }
  static uint64_t pack(TokenId left, TokenId right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  size_t slot(uint64_t key) const { return static_cast<size_t>(mix64(key)) & mask_; }
  std::vector<uint64_t> keys_;
  std::vector<TokenId> values_;
  size_t mask_ = 0;
};

// Open addressing, linear probing: token bytes -> id. Keys of up to 16 bytes are stored in the
// slot itself (zero-padded), so a lookup of a typical piece touches one cache line; longer keys are
// compared against the token list passed in.
class PieceTable {
 public:
  void build(const std::vector<std::string>& tokens, size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap *= 2;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
    for (size_t id = 0; id < n; ++id) {
      const Slot key = make(tokens[id]);
      size_t h = key.hash & mask_;
      while (slots_[h].id >= 0) h = (h + 1) & mask_;
      slots_[h] = key;
      slots_[h].id = static_cast<TokenId>(id);
    }
  }
  // The id of the token with exactly these bytes, or -1.
  TokenId find(std::string_view s, const std::vector<std::string>& tokens) const { return find(s, hash64(s), tokens); }
  TokenId find(std::string_view s, uint64_t hash, const std::vector<std::string>& tokens) const {
    const Slot key = make(s, hash);
    for (size_t h = key.hash & mask_;; h = (h + 1) & mask_) {
      const Slot& slot = slots_[h];
      if (slot.id < 0) return -1;
      if (slot.hash == key.hash && slot.len == key.len && slot.a == key.a && slot.b == key.b &&
          (s.size() <= 16 || tokens[slot.id] == s))
        return slot.id;
    }
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint64_t a = 0, b = 0;  // the first 16 bytes, zero-padded
    uint32_t len = 0;
    TokenId id = -1;
  };
  static Slot make(std::string_view s) { return make(s, hash64(s)); }
  static Slot make(std::string_view s, uint64_t hash) {
    Slot k;
    k.hash = hash;
    std::memcpy(&k.a, s.data(), std::min<size_t>(s.size(), 8));
    if (s.size() > 8) std::memcpy(&k.b, s.data() + 8, std::min<size_t>(s.size() - 8, 8));
    k.len = static_cast<uint32_t>(s.size());
    return k;
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

struct ByteBpeTokenizer::Tables {
  // Every ordinary token's bytes -> id (the whole-piece shortcut).
  PieceTable piece;
  // Every split of every ordinary token into two ordinary tokens: tiktoken merges any adjacent
  // pair whose concatenation is a token, not only the pairs listed as merges.
  PairTable pairs;
};

}  // namespace tformer
