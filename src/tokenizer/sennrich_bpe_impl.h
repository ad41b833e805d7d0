// Internal to Sennrich BPE (bpe_codes.cpp, bpe_segment.cpp, bpe_apply.cpp): SennrichBpe::Impl,
// the parsed codes (symbols, merges by rank, the merge table the hot path reads) and the
// operations on them: parsing a merge, segmenting a word, applying to lines.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/hash.h"
#include "core/utf8.h"
#include "tokenizer/sennrich_bpe.h"
#include "tokenizer/text_lines.h"

namespace tformer {

constexpr std::string_view kEndOfWord = "</w>";
// Words of more symbols than this take the heap + linked-list path (O(n log n)); shorter ones the
// direct rescan that apply_bpe.py does (O(n^2), faster for short words).
constexpr size_t kLongWord = 48;

inline uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct Merge {
  int32_t rank;
  int32_t result;
};

// (first id, second id) -> merge, open addressing; built once, read-only afterwards.
class MergeTable {
 public:
  void build(const std::vector<std::array<int32_t, 3>>& by_rank) {
    size_t capacity = 16;
    while (capacity < by_rank.size() * 2 + 2) capacity *= 2;
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    for (size_t r = 0; r < by_rank.size(); ++r) {
      const uint64_t key = pair_key(by_rank[r][0], by_rank[r][1]);
      size_t slot = mix64(key) & mask_;
      while (slots_[slot].merge.rank >= 0) slot = (slot + 1) & mask_;
      slots_[slot] = {key, {static_cast<int32_t>(r), by_rank[r][2]}};
    }
  }
  const Merge* find(uint64_t key) const {
    if (slots_.empty()) return nullptr;
    size_t slot = mix64(key) & mask_;
    while (true) {
      const Slot& s = slots_[slot];
      if (s.merge.rank < 0) return nullptr;
      if (s.key == key) return &s.merge;
      slot = (slot + 1) & mask_;
    }
  }

 private:
  struct Slot {
    uint64_t key = 0;
    Merge merge{-1, -1};
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

inline bool is_one_code_point(std::string_view s) {
  return !s.empty() && utf8_sequence_length(static_cast<unsigned char>(s[0])) == s.size();
}

struct SennrichBpe::Impl {
  int version_minor = 2;
  std::vector<std::string> symbols;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> symbol_ids;
  std::unordered_map<uint64_t, Merge> merges;
  std::vector<std::array<int32_t, 3>> by_rank;  // rank -> (first, second, result)
  int64_t n_merges = 0;
  int32_t end_of_word_id = kUnknownSymbol;  // version 0.1: the "</w>" symbol
  mutable std::atomic<int64_t> heap_pushes{0}, merges_done{0};

  int32_t intern(std::string_view s) {
    auto it = symbol_ids.find(s);
    if (it != symbol_ids.end()) return it->second;
    const auto id = static_cast<int32_t>(symbols.size());
    symbols.emplace_back(s);
    symbol_ids.emplace(std::string(s), id);
    return id;
  }
  int32_t lookup(std::string_view s) const {
    auto it = symbol_ids.find(s);
    return it == symbol_ids.end() ? kUnknownSymbol : it->second;
  }
  MergeTable table;  // the same merges, for the hot path
  // Symbol ids of ASCII characters inside a word and at its end (built after parsing).
  std::array<int32_t, 128> ascii_inner{}, ascii_final{};
  void finish() {
    table.build(by_rank);
    for (int c = 0; c < 128; ++c) {
      const std::string ch(1, static_cast<char>(c));
      ascii_inner[c] = lookup(ch);
      ascii_final[c] = version_minor == 2 ? lookup(ch + std::string(kEndOfWord)) : lookup(ch);
    }
  }
  const Merge* find_merge(int32_t a, int32_t b) const {
    if (a < 0 || b < 0) return nullptr;
    return table.find(pair_key(a, b));
  }

  // Adds the merge on line `line` of the codes named `name`, validated (bpe_codes.cpp).
  void add_merge(const std::string& first, const std::string& second, const std::string& name, int64_t line,
                 std::unordered_map<uint64_t, int64_t>& line_of);
  std::unordered_set<std::string> produced;  // results of merges so far (during parsing)

  // Word segmentation (bpe_segment.cpp).
  void initial_pieces(std::string_view word, std::vector<Piece>& out) const;
  void merge_short(std::vector<Piece>& w) const;
  void merge_long(std::vector<Piece>& w) const;
  void segment_pieces(std::string_view word, std::vector<Piece>& w, int force = 0) const;

  // apply_bpe.py's lines (bpe_apply.cpp).
  static constexpr size_t kMaxCachedWords = size_t{1} << 20;
  struct Cache {
    std::unordered_map<std::string, std::string, StringHash, std::equal_to<>> words;
    std::vector<Piece> scratch;
  };
  void append_word(std::string_view word, std::vector<Piece>& scratch, std::string& out) const;
  void apply_line(std::string_view line, Cache& cache, std::string& out) const;
  void apply_line_rest(std::string_view rest, Cache& cache, std::string& out) const;
  void apply_lines(std::string_view text, text::LineMode mode, std::vector<Cache>& caches, std::string& out) const;
};

}  // namespace tformer
