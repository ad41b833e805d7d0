// Sennrich BPE, step 1: the words of UTF-8 text and their counts (see sennrich_bpe.h), from a string
// or from files read block by block, counted in parallel over chunks cut between words.
#include <omp.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/hash.h"
#include "core/utf8.h"
#include "tokenizer/sennrich_bpe.h"

namespace tformer {

namespace {

// Word -> count, open addressing; the map owns the bytes of its words in one arena.
class WordCounter {
 public:
  WordCounter() { rehash(1 << 12); }

  void add(std::string_view word, uint64_t count) {
    const uint64_t h = hash64(word);
    size_t slot = h & mask_;
    while (true) {
      Slot& s = slots_[slot];
      if (s.length == kEmpty) {
        s.hash = h;
        s.offset = arena_.size();
        s.length = static_cast<uint32_t>(word.size());
        s.count = count;
        arena_.append(word);
        if (++size_ * 2 > slots_.size()) rehash(slots_.size() * 2);
        return;
      }
      if (s.hash == h && s.length == word.size() &&
          std::memcmp(arena_.data() + s.offset, word.data(), word.size()) == 0) {
        s.count += count;
        return;
      }
      slot = (slot + 1) & mask_;
    }
  }
  template <typename Fn>
  void for_each(Fn&& fn) const {
    for (const Slot& s : slots_)
      if (s.length != kEmpty) fn(std::string_view(arena_.data() + s.offset, s.length), s.count);
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint32_t kEmpty = 0xFFFFFFFFu;
  struct Slot {
    uint64_t hash = 0;
    uint64_t offset = 0;
    uint64_t count = 0;
    uint32_t length = kEmpty;
  };
  void rehash(size_t capacity) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    for (const Slot& s : old) {
      if (s.length == kEmpty) continue;
      size_t slot = s.hash & mask_;
      while (slots_[slot].length != kEmpty) slot = (slot + 1) & mask_;
      slots_[slot] = s;
    }
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
  std::string arena_;
};

// Counts the words of s[begin, end) into counter. Words end at ' ', '\n', '\r' (not part of the
// word) and after a kept line break such as \f or U+2028 (part of the word): see text_lines.h.
void count_range(std::string_view s, size_t begin, size_t end, WordCounter& counter) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t word_start = begin;
  size_t i = begin;
  while (i < end) {
    const unsigned char c = p[i];
    if (c > 0x20 && c != 0xC2 && c != 0xE2) {
      ++i;
      continue;
    }
    if (c == ' ' || c == '\n' || c == '\r') {
      if (i > word_start) counter.add(s.substr(word_start, i - word_start), 1);
      word_start = ++i;
      continue;
    }
    const size_t b = text::splitlines_break_at(s, i);
    if (b > 0) {
      i += b;
      counter.add(s.substr(word_start, i - word_start), 1);
      word_start = i;
      continue;
    }
    ++i;
  }
  if (end > word_start) counter.add(s.substr(word_start, end - word_start), 1);
}

// Counts the words of text into total, in parallel over chunks cut at ' ', '\n' or '\r'.
// Validates UTF-8 first; errors name `name` and the byte offset (base_offset + position).
void count_block(std::string_view text, const std::string& name, uint64_t base_offset, WordCounter& total) {
  const int n_threads = text.size() < (1 << 20) ? 1 : std::max(1, omp_get_max_threads());
  std::vector<size_t> cuts(static_cast<size_t>(n_threads) + 1, text.size());
  cuts[0] = 0;
  for (int t = 1; t < n_threads; ++t) {
    size_t c = std::max(cuts[t - 1], text.size() * static_cast<size_t>(t) / static_cast<size_t>(n_threads));
    while (c < text.size() && text[c] != ' ' && text[c] != '\n' && text[c] != '\r') ++c;
    cuts[t] = c;
  }
  std::vector<WordCounter> counters(static_cast<size_t>(n_threads));
  std::vector<size_t> bad(static_cast<size_t>(n_threads), SIZE_MAX);
#pragma omp parallel for num_threads(n_threads) schedule(static, 1)
  for (int t = 0; t < n_threads; ++t) {
    const std::string_view chunk = text.substr(cuts[t], cuts[t + 1] - cuts[t]);
    if (auto off = find_invalid_utf8(chunk)) {
      bad[t] = cuts[t] + *off;
      continue;
    }
    count_range(text, cuts[t], cuts[t + 1], counters[t]);
  }
  for (size_t off : bad)
    if (off != SIZE_MAX) fail_file(name, "{}: invalid UTF-8 at byte offset {}", name, base_offset + off);
  for (const WordCounter& c : counters) c.for_each([&](std::string_view w, uint64_t n) { total.add(w, n); });
}

std::vector<BpeWordCount> sorted_words(const WordCounter& counter) {
  std::vector<BpeWordCount> words;
  words.reserve(counter.size());
  counter.for_each([&](std::string_view w, uint64_t n) { words.push_back({std::string(w), n}); });
  std::sort(words.begin(), words.end(), [](const BpeWordCount& a, const BpeWordCount& b) { return a.word < b.word; });
  return words;
}

}  // namespace

std::vector<BpeWordCount> bpe_count_words(std::string_view text, const std::string& name) {
  WordCounter counter;
  count_block(text, name, 0, counter);
  return sorted_words(counter);
}

std::vector<BpeWordCount> bpe_count_words_in_files(const std::vector<std::string>& paths, size_t block_size) {
  TF_CHECK(block_size > 0, "bpe_count_words_in_files: block size 0");
  const size_t kBlock = block_size;
  WordCounter counter;
  std::string buffer;
  for (const std::string& path : paths) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) fail_file(path, "{}: cannot open for reading: {}", path, std::strerror(errno));
    buffer.clear();
    uint64_t base = 0;  // file offset of buffer[0]
    bool eof = false;
    while (!eof) {
      const size_t had = buffer.size();
      buffer.resize(had + kBlock);
      const size_t got = std::fread(buffer.data() + had, 1, kBlock, f);
      buffer.resize(had + got);
      if (got < kBlock) {
        if (std::ferror(f)) {
          std::fclose(f);
          fail_file(path, "{}: read error", path);
        }
        eof = true;
      }
      // Count up to the last word boundary; the rest waits for the next block.
      size_t cut = buffer.size();
      if (!eof) {
        while (cut > 0 && buffer[cut - 1] != ' ' && buffer[cut - 1] != '\n' && buffer[cut - 1] != '\r') --cut;
        if (cut == 0) continue;  // one word longer than the buffer: read more
      }
      try {
        count_block(std::string_view(buffer.data(), cut), path, base, counter);
      } catch (...) {
        std::fclose(f);
        throw;
      }
      buffer.erase(0, cut);
      base += cut;
    }
    std::fclose(f);
  }
  return sorted_words(counter);
}

}  // namespace tformer
