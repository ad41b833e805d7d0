// Sennrich BPE learning from word counts, steps 2 to 4 (see sennrich_bpe.h for the algorithm and the
// subword-nmt conventions; step 1, counting the words: bpe_count_words.cpp).
//
// Data layout: symbols are interned strings (ids); each distinct word is a run of symbol ids in
// one flat array with its frequency; each pair (a, b) of ids has a pair id with its count and the
// list of words that contain (or once contained) it. A merge rewrites only the words on its pair's
// list. The best pair comes from a max-heap of (count, pair id) entries with lazy deletion: an
// entry whose count is stale is re-pushed with the fresh count when it reaches the top.
#include <omp.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <unordered_map>

#include "core/error.h"
#include "core/hash.h"
#include "core/utf8.h"
#include "tokenizer/sennrich_bpe.h"

namespace tformer {

namespace {

constexpr std::string_view kEndOfWord = "</w>";
__extension__ typedef __int128 Int128;

// Pair (a, b) of symbol ids -> pair id; open addressing on the 64-bit key.
class PairIndex {
 public:
  PairIndex() { rehash(1 << 16); }
  // Returns the pair id, or -1.
  int64_t find(uint64_t key) const {
    size_t slot = mix64(key) & mask_;
    while (true) {
      const Slot& s = slots_[slot];
      if (s.id < 0) return -1;
      if (s.key == key) return s.id;
      slot = (slot + 1) & mask_;
    }
  }
  // Inserts key with id when absent; returns the id stored for key.
  int64_t insert(uint64_t key, int64_t id) {
    size_t slot = mix64(key) & mask_;
    while (true) {
      Slot& s = slots_[slot];
      if (s.id < 0) {
        s.key = key;
        s.id = id;
        if (++size_ * 2 > slots_.size()) rehash(slots_.size() * 2);
        return id;
      }
      if (s.key == key) return s.id;
      slot = (slot + 1) & mask_;
    }
  }

 private:
  struct Slot {
    uint64_t key = 0;
    int64_t id = -1;
  };
  void rehash(size_t capacity) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    for (const Slot& s : old) {
      if (s.id < 0) continue;
      size_t slot = mix64(s.key) & mask_;
      while (slots_[slot].id >= 0) slot = (slot + 1) & mask_;
      slots_[slot] = s;
    }
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

inline uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// The learner's state. Pair counts follow subword-nmt's two tables:
//   stats (the "visible" table): pairs with in_stats set, count in `visible`;
//   big_stats (the full table): `full` for every pair id.
// Pruning moves visible pairs below the threshold into the full table (a negative visible count
// is added to the full one, a non-negative one replaces it); a reload copies the full table back.
class Learner {
 public:
  Learner(const std::vector<BpeWordCount>& words, const BpeLearnOptions& options) : options_(options) {
    build_words(words);
  }

  BpeLearnResult run();

 private:
  struct HeapEntry {
    int64_t count;
    uint32_t pair;
  };

  int32_t intern(std::string&& s) {
    auto [it, inserted] = symbol_ids_.try_emplace(std::move(s), static_cast<int32_t>(symbols_.size()));
    if (inserted) symbols_.push_back(it->first);
    return it->second;
  }
  void build_words(const std::vector<BpeWordCount>& words);

  uint32_t pair_id(int32_t a, int32_t b) {
    const auto fresh = static_cast<int64_t>(first_.size());
    const auto id = static_cast<uint32_t>(pairs_.insert(pair_key(a, b), fresh));
    if (id == first_.size()) {
      first_.push_back(a);
      second_.push_back(b);
      visible_.push_back(0);
      full_.push_back(0);
      in_stats_.push_back(0);
      touched_at_.push_back(-1);
      words_of_.emplace_back();
    }
    return id;
  }
  // stats[pair] += delta, creating the entry when the pair is not visible (Python's defaultdict).
  void add(uint32_t p, int64_t delta) {
    if (!in_stats_[p]) {
      in_stats_[p] = 1;
      visible_[p] = delta;
      stats_list_.push_back(p);
      ++n_stats_;
    } else {
      visible_[p] += delta;
    }
    if (delta > 0 && touched_at_[p] != step_) {
      touched_at_[p] = step_;
      touched_.push_back(p);
    }
  }
  void note_word(uint32_t p, uint32_t w) {
    auto& list = words_of_[p];
    if (list.empty() || list.back() != w) list.push_back(w);
  }

  // (first, second) of pair p compared with pair q as strings (code-point order).
  bool pair_less(uint32_t p, uint32_t q) const {
    if (first_[p] != first_[q]) return symbols_[first_[p]] < symbols_[first_[q]];
    if (second_[p] != second_[q]) return symbols_[second_[p]] < symbols_[second_[q]];
    return false;
  }
  bool entry_less(const HeapEntry& x, const HeapEntry& y) const {
    if (x.count != y.count) return x.count < y.count;
    return pair_less(x.pair, y.pair);
  }
  void heap_push(HeapEntry e) {
    heap_.push_back(e);
    std::push_heap(heap_.begin(), heap_.end(),
                   [this](const HeapEntry& a, const HeapEntry& b) { return entry_less(a, b); });
  }
  void heap_pop() {
    std::pop_heap(heap_.begin(), heap_.end(),
                  [this](const HeapEntry& a, const HeapEntry& b) { return entry_less(a, b); });
    heap_.pop_back();
  }
  void heap_rebuild() {
    heap_.clear();
    for (uint32_t p : stats_list_) heap_.push_back({visible_[p], p});
    std::make_heap(heap_.begin(), heap_.end(),
                   [this](const HeapEntry& a, const HeapEntry& b) { return entry_less(a, b); });
  }
  // The visible pair with the largest (count, pair), or -1 when the heap holds none.
  int64_t heap_best() {
    while (!heap_.empty()) {
      const HeapEntry top = heap_.front();
      if (in_stats_[top.pair] && top.count == visible_[top.pair]) return top.pair;
      heap_pop();
      if (in_stats_[top.pair] && top.count > visible_[top.pair]) heap_push({visible_[top.pair], top.pair});
    }
    return -1;
  }

  void prune(double threshold);
  int64_t reload_best();
  void merge(uint32_t best, int32_t merged);

  const BpeLearnOptions& options_;
  std::vector<std::string> symbols_;
  std::unordered_map<std::string, int32_t> symbol_ids_;

  std::vector<int32_t> syms_;  // all words' symbols; word w at [offset_[w], offset_[w] + length_[w])
  std::vector<uint64_t> offset_;
  std::vector<uint32_t> length_;
  std::vector<int64_t> freq_;
  std::vector<int64_t> seen_at_;  // last merge step that looked at each word

  PairIndex pairs_;
  std::vector<int32_t> first_, second_;
  std::vector<int64_t> visible_, full_;
  std::vector<uint8_t> in_stats_;
  std::vector<int64_t> touched_at_;
  std::vector<std::vector<uint32_t>> words_of_;
  std::vector<uint32_t> stats_list_;  // visible pairs (may hold pairs pruned since; compacted by prune)
  int64_t n_stats_ = 0;
  std::vector<uint32_t> touched_;
  std::vector<HeapEntry> heap_;
  int64_t step_ = 0;
};

void Learner::build_words(const std::vector<BpeWordCount>& words) {
  std::unordered_map<uint32_t, int32_t> inner, last;  // code point -> symbol id
  size_t total = 0;
  for (const auto& w : words) total += w.word.size();
  syms_.reserve(total);
  offset_.reserve(words.size());
  for (const auto& w : words) {
    if (w.word.empty()) fail_input("word", "learn_bpe: empty word");
    if (auto bad = find_invalid_utf8(w.word)) fail_input(w.word, "learn_bpe: word '{}' is not valid UTF-8", w.word);
    if (w.count == 0) continue;
    if (w.count > static_cast<uint64_t>(INT64_MAX))
      fail_input(w.word, "learn_bpe: count {} of '{}' is too large", w.count, w.word);
    offset_.push_back(syms_.size());
    size_t i = 0;
    while (i < w.word.size()) {
      const size_t start = i;
      const uint32_t cp = next_code_point(w.word, i);
      if (cp == ' ' || cp == '\n' || cp == '\r')
        fail_input(w.word, "learn_bpe: word '{}' contains a space or line break", w.word);
      const bool is_last = i == w.word.size();
      auto& table = is_last ? last : inner;
      auto it = table.find(cp);
      if (it == table.end()) {
        std::string s = w.word.substr(start, i - start);
        if (is_last) s += kEndOfWord;
        it = table.emplace(cp, intern(std::move(s))).first;
      }
      syms_.push_back(it->second);
    }
    length_.push_back(static_cast<uint32_t>(syms_.size() - offset_.back()));
    freq_.push_back(static_cast<int64_t>(w.count));
  }
  seen_at_.assign(freq_.size(), -1);
}

void Learner::prune(double threshold) {
  size_t kept = 0;
  for (uint32_t p : stats_list_) {
    if (!in_stats_[p]) continue;
    const int64_t v = visible_[p];
    if (static_cast<double>(v) < threshold) {
      in_stats_[p] = 0;
      --n_stats_;
      if (v < 0)
        full_[p] += v;
      else
        full_[p] = v;
    } else {
      stats_list_[kept++] = p;
    }
  }
  stats_list_.resize(kept);
}

// Copies the full table back into the visible one and returns its best pair.
int64_t Learner::reload_best() {
  const auto n_pairs = static_cast<uint32_t>(first_.size());
  stats_list_.resize(n_pairs);
  int64_t best = -1;
  for (uint32_t p = 0; p < n_pairs; ++p) {
    in_stats_[p] = 1;
    visible_[p] = full_[p];
    stats_list_[p] = p;
    if (best < 0 || full_[p] > full_[best] || (full_[p] == full_[best] && pair_less(static_cast<uint32_t>(best), p)))
      best = p;
  }
  n_stats_ = n_pairs;
  return best;
}

void Learner::merge(uint32_t best, int32_t merged) {
  const int32_t a = first_[best], b = second_[best];
  std::vector<uint32_t> list = std::move(words_of_[best]);
  words_of_[best] = {};
  for (uint32_t w : list) {
    if (seen_at_[w] == step_) continue;
    seen_at_[w] = step_;
    int32_t* s = syms_.data() + offset_[w];
    const size_t n = length_[w];
    const int64_t f = freq_[w];
    // Old word: each occurrence of (a, b), left to right without overlap, loses its neighbours.
    bool found = false;
    for (size_t i = 0; i + 1 < n;) {
      if (s[i] == a && s[i + 1] == b) {
        found = true;
        if (i > 0) add(pair_id(s[i - 1], a), -f);
        // (b, next) is not counted here when the next occurrence starts at i + 2: that one
        // removes it as its (previous, a) pair.
        if (i + 2 < n && !(s[i + 2] == a && i + 3 < n && s[i + 3] == b)) add(pair_id(b, s[i + 2]), -f);
        i += 2;
      } else {
        ++i;
      }
    }
    if (!found) continue;
    size_t out = 0;
    for (size_t i = 0; i < n;) {
      if (i + 1 < n && s[i] == a && s[i + 1] == b) {
        s[out++] = merged;
        i += 2;
      } else {
        s[out++] = s[i++];
      }
    }
    length_[w] = static_cast<uint32_t>(out);
    // New word: every symbol equal to the merged one gains its neighbours (subword-nmt's rule; a
    // run "ab ab" counts (ab, ab) once, from its second member).
    for (size_t i = 0; i < out; ++i) {
      if (s[i] != merged) continue;
      if (i > 0) {
        const uint32_t p = pair_id(s[i - 1], merged);
        add(p, f);
        note_word(p, w);
      }
      if (i + 1 < out && s[i + 1] != merged) {
        const uint32_t p = pair_id(merged, s[i + 1]);
        add(p, f);
        note_word(p, w);
      }
    }
  }
}

BpeLearnResult Learner::run() {
  BpeLearnResult result;
  result.initial_vocab_size = static_cast<int64_t>(symbols_.size());
  if (options_.merges < 0)
    fail_input("merges", "learn_bpe: the number of merges must be >= 0, got {}", options_.merges);
  if (options_.min_frequency < 1)
    fail_input("min_frequency", "learn_bpe: min_frequency must be >= 1, got {}", options_.min_frequency);

  // Step 3: pair counts over distinct words.
  step_ = -1;
  for (uint32_t w = 0; w < freq_.size(); ++w) {
    const int32_t* s = syms_.data() + offset_[w];
    for (size_t i = 0; i + 1 < length_[w]; ++i) {
      const uint32_t p = pair_id(s[i], s[i + 1]);
      add(p, freq_[w]);
      note_word(p, w);
    }
  }
  touched_.clear();
  if (first_.empty()) {
    result.stop_reason = "no symbol pairs in the input";
    return result;
  }
  full_ = visible_;
  int64_t max_count = 0;
  for (int64_t v : visible_) max_count = std::max(max_count, v);
  // subword-nmt: threshold = max(stats.values()) / 10 ("inspired by Zipfian assumption").
  double threshold = static_cast<double>(max_count) / 10.0;
  heap_rebuild();

  // Step 4: the merge loop.
  for (int64_t i = 0; i < options_.merges; ++i) {
    step_ = i;
    int64_t best = n_stats_ > 0 ? heap_best() : -1;
    // The best visible pair may be below pairs set aside by pruning: re-read the full table.
    if (best < 0 || (i > 0 && static_cast<double>(visible_[best]) < threshold)) {
      prune(threshold);
      best = reload_best();
      // Python: stats[best] * i / (i + 10000.0), the product exact, then rounded once to double.
      const Int128 product = static_cast<Int128>(visible_[best]) * i;
      threshold = static_cast<double>(product) / (static_cast<double>(i) + 10000.0);
      prune(threshold);
      heap_rebuild();
    }
    const auto p = static_cast<uint32_t>(best);
    const int64_t count = in_stats_[p] ? visible_[p] : 0;
    if (count < options_.min_frequency) {
      result.stop_reason = fmt::format("no pair has frequency >= {}. Stopping", options_.min_frequency);
      break;
    }
    std::string merged_string = symbols_[first_[p]] + symbols_[second_[p]];
    const int32_t merged = intern(std::move(merged_string));
    result.merges.emplace_back(symbols_[first_[p]], symbols_[second_[p]]);
    result.counts.push_back(count);
    merge(p, merged);
    visible_[p] = 0;  // in_stats_[p] is set: count >= min_frequency >= 1 kept it through any prune
    for (uint32_t t : touched_)
      if (in_stats_[t]) heap_push({visible_[t], t});
    touched_.clear();
    if (i % 100 == 0) prune(threshold);
    if (options_.on_step) {
      BpeStep s;
      s.step = i + 1;
      s.first = result.merges.back().first;
      s.second = result.merges.back().second;
      s.count = count;
      s.symbol = symbols_[merged];
      s.vocab_size = static_cast<int64_t>(symbols_.size());
      options_.on_step(s);
    }
  }
  return result;
}

}  // namespace

BpeLearnResult learn_bpe_from_word_counts(const std::vector<BpeWordCount>& words, const BpeLearnOptions& options) {
  Learner learner(words, options);
  return learner.run();
}

BpeLearnResult learn_bpe(const std::vector<std::string>& paths, const BpeLearnOptions& options) {
  return learn_bpe_from_word_counts(bpe_count_words_in_files(paths), options);
}

std::string format_bpe_codes(const std::vector<std::pair<std::string, std::string>>& merges) {
  std::string out = "#version: 0.2\n";
  for (const auto& [a, b] : merges) {
    out += a;
    out += ' ';
    out += b;
    out += '\n';
  }
  return out;
}

}  // namespace tformer
