#include "tokenizer/byte_bpe_train.h"

#include <algorithm>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"

namespace tformer {

std::array<unsigned char, 256> gpt2_byte_order() {
  std::array<unsigned char, 256> order{};
  const auto self = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  int n = 0;
  for (int b = 0; b < 256; ++b)
    if (self(b)) order[n++] = static_cast<unsigned char>(b);
  for (int b = 0; b < 256; ++b)
    if (!self(b)) order[n++] = static_cast<unsigned char>(b);
  return order;
}

namespace {

uint64_t pack(TokenId a, TokenId b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
TokenId left_of(uint64_t key) { return static_cast<TokenId>(key >> 32); }
TokenId right_of(uint64_t key) { return static_cast<TokenId>(key & 0xFFFFFFFFu); }

struct Word {
  std::vector<TokenId> symbols;
  int64_t count;
};

struct HeapEntry {
  int64_t count;
  uint64_t pair;
  // Max count first; on equal counts the smaller (left, right) pair first.
  bool operator<(const HeapEntry& o) const { return count != o.count ? count < o.count : pair > o.pair; }
};

}  // namespace

ByteBpeTokenizer train_byte_bpe(std::string_view corpus, const ByteBpeTrainOptions& options) {
  if (options.vocab_size < 257)
    fail_input("vocab_size", "byte-bpe training: vocab size {} is below 257 (256 bytes and <|endoftext|>)",
               options.vocab_size);
  if (options.vocab_size > INT32_MAX)
    fail_input("vocab_size", "byte-bpe training: vocab size {} is too large", options.vocab_size);
  const std::array<unsigned char, 256> byte_of_id = gpt2_byte_order();
  std::array<TokenId, 256> id_of_byte{};
  for (int i = 0; i < 256; ++i) id_of_byte[byte_of_id[i]] = i;

  // 1-2. Distinct pieces and their counts, as byte ids.
  std::unordered_map<std::string_view, int64_t> piece_count;
  ByteBpeTokenizer::for_each_piece(options.pattern, corpus, [&](std::string_view piece) { ++piece_count[piece]; });
  std::vector<Word> words;
  words.reserve(piece_count.size());
  for (const auto& [piece, count] : piece_count) {
    if (piece.size() < 2) continue;  // nothing to merge
    Word w{std::vector<TokenId>(piece.size()), count};
    for (size_t i = 0; i < piece.size(); ++i) w.symbols[i] = id_of_byte[static_cast<unsigned char>(piece[i])];
    words.push_back(std::move(w));
  }
  // A fixed order (by bytes) so that the index lists, and hence nothing observable, depend on the
  // hash map's iteration order.
  std::sort(words.begin(), words.end(), [](const Word& a, const Word& b) { return a.symbols < b.symbols; });

  // 3. Pair counts and the pair -> words index.
  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<uint32_t>> pair_words;
  const auto add_word = [&](uint32_t w, int64_t sign, std::vector<uint64_t>* changed) {
    const auto& s = words[w].symbols;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const uint64_t key = pack(s[i], s[i + 1]);
      pair_count[key] += sign * words[w].count;
      if (sign > 0) pair_words[key].push_back(w);
      if (changed) changed->push_back(key);
    }
  };
  for (uint32_t w = 0; w < words.size(); ++w) add_word(w, +1, nullptr);
  std::priority_queue<HeapEntry> heap;
  for (const auto& [key, count] : pair_count) heap.push({count, key});

  // 4-5. The merge loop.
  std::vector<std::string> token_bytes(256);
  for (int i = 0; i < 256; ++i) token_bytes[i] = std::string(1, static_cast<char>(byte_of_id[i]));
  std::unordered_map<std::string, TokenId> token_of(token_bytes.size());
  for (int i = 0; i < 256; ++i) token_of.emplace(token_bytes[i], i);
  std::vector<ByteBpeTokenizer::Merge> merges;
  const int64_t n_merges_max = options.vocab_size - 257;
  std::vector<uint32_t> last_seen(words.size(), UINT32_MAX);
  uint32_t step = 0;
  std::vector<uint64_t> changed;
  while (static_cast<int64_t>(merges.size()) < n_merges_max && !heap.empty()) {
    const HeapEntry top = heap.top();
    heap.pop();
    auto it = pair_count.find(top.pair);
    if (it == pair_count.end() || it->second != top.count) continue;  // stale
    if (top.count < options.min_frequency || top.count <= 0) break;
    const TokenId a = left_of(top.pair), b = right_of(top.pair);
    const std::string bytes = token_bytes[a] + token_bytes[b];
    TokenId merged;
    if (auto existing = token_of.find(bytes); existing != token_of.end()) {
      merged = existing->second;  // already a token: reuse it, no new merge
    } else {
      merged = static_cast<TokenId>(token_bytes.size());
      token_bytes.push_back(bytes);
      token_of.emplace(bytes, merged);
      merges.emplace_back(a, b);
      if (options.on_merge) options.on_merge({merges.size(), a, b, merged, bytes, top.count});
    }
    ++step;
    changed.clear();
    const std::vector<uint32_t> affected = std::move(pair_words[top.pair]);
    pair_words.erase(top.pair);
    for (uint32_t w : affected) {
      if (last_seen[w] == step) continue;  // listed twice
      last_seen[w] = step;
      auto& s = words[w].symbols;
      bool has = false;
      for (size_t i = 0; i + 1 < s.size() && !has; ++i) has = s[i] == a && s[i + 1] == b;
      if (!has) continue;  // stale index entry
      add_word(w, -1, &changed);
      size_t out = 0;
      for (size_t i = 0; i < s.size();) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          s[out++] = merged;
          i += 2;
        } else {
          s[out++] = s[i++];
        }
      }
      s.resize(out);
      add_word(w, +1, &changed);
    }
    std::sort(changed.begin(), changed.end());
    changed.erase(std::unique(changed.begin(), changed.end()), changed.end());
    for (uint64_t key : changed) {
      auto c = pair_count.find(key);
      if (c == pair_count.end()) continue;
      if (c->second <= 0) {
        pair_count.erase(c);
        continue;
      }
      heap.push({c->second, key});
    }
  }
  const TokenId eot = static_cast<TokenId>(256 + merges.size());
  ByteBpeTokenizer tok(byte_of_id, std::move(merges), {{"<|endoftext|>", eot}});
  tok.set_pattern(options.pattern);
  return tok;
}

}  // namespace tformer
