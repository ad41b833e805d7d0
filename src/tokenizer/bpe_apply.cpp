// Sennrich BPE applying: codes parsing and validation, word segmentation, apply_bpe.py's line
// conventions. See sennrich_bpe.h.
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstring>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "core/file_io.h"
#include "core/hash.h"
#include "core/utf8.h"
#include "tokenizer/sennrich_bpe.h"

namespace tformer {

namespace {

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

bool is_one_code_point(std::string_view s) {
  return !s.empty() && utf8_sequence_length(static_cast<unsigned char>(s[0])) == s.size();
}

}  // namespace

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

  void add_merge(const std::string& first, const std::string& second, const std::string& name, int64_t line,
                 std::unordered_map<uint64_t, int64_t>& line_of) {
    auto producible = [&](const std::string& part) {
      if (symbol_ids.contains(part) && produced.contains(part)) return true;
      if (is_one_code_point(part)) return true;
      if (version_minor == 1) return part == kEndOfWord;
      return part.size() > kEndOfWord.size() && part.ends_with(kEndOfWord) &&
             is_one_code_point(std::string_view(part).substr(0, part.size() - kEndOfWord.size()));
    };
    for (const std::string* part : {&first, &second})
      if (!producible(*part))
        fail_file(name, "{}:{}: '{} {}': '{}' is neither a character{} nor the result of an earlier merge", name, line,
                  first, second, *part, version_minor == 2 ? " (optionally followed by </w>)" : " nor </w>");
    const int32_t a = intern(first), b = intern(second);
    const uint64_t key = pair_key(a, b);
    if (auto it = line_of.find(key); it != line_of.end())
      fail_file(name, "{}:{}: duplicate merge '{} {}' (first at line {})", name, line, first, second, it->second);
    line_of.emplace(key, line);
    const std::string result = first + second;
    const int32_t r = intern(result);
    produced.insert(result);
    merges.emplace(key, Merge{static_cast<int32_t>(n_merges), r});
    by_rank.push_back({a, b, r});
    ++n_merges;
  }
  std::unordered_set<std::string> produced;  // results of merges so far (during parsing)

  // Initial symbols of a word (no spaces): its characters, the last one with "</w>".
  void initial_pieces(std::string_view word, std::vector<Piece>& out) const {
    out.clear();
    std::string scratch;
    size_t i = 0;
    while (i < word.size()) {
      const size_t start = i;
      i += utf8_sequence_length(static_cast<unsigned char>(word[i]));
      const std::string_view ch = word.substr(start, i - start);
      const auto c0 = static_cast<unsigned char>(word[start]);
      int32_t id;
      if (c0 < 128) {
        id = i == word.size() ? ascii_final[c0] : ascii_inner[c0];
      } else if (i == word.size() && version_minor == 2) {
        scratch.assign(ch);
        scratch += kEndOfWord;
        id = lookup(scratch);
      } else {
        id = lookup(ch);
      }
      out.push_back({id, static_cast<uint32_t>(start), static_cast<uint32_t>(i)});
    }
    if (version_minor == 1) out.push_back({end_of_word_id, static_cast<uint32_t>(i), static_cast<uint32_t>(i)});
  }

  // apply_bpe.py's loop: take the lowest-ranked adjacent pair, merge all its occurrences left to
  // right without overlap, repeat. Each round scans the word once (O(n^2) in all): for short
  // words. The rank of each (piece, next piece) pair is kept and recomputed only where a piece
  // changed.
  void merge_short(std::vector<Piece>& w) const {
    size_t n = w.size();
    thread_local std::vector<int32_t> rank;
    thread_local std::vector<uint8_t> fresh;
    rank.resize(n);
    fresh.assign(n, 0);
    auto rank_of = [&](size_t i) {
      const Merge* m = find_merge(w[i].id, w[i + 1].id);
      return m ? m->rank : INT32_MAX;
    };
    for (size_t i = 0; i + 1 < n; ++i) rank[i] = rank_of(i);
    while (n > 1) {
      int32_t best = INT32_MAX;
      for (size_t i = 0; i + 1 < n; ++i) best = std::min(best, rank[i]);
      if (best == INT32_MAX) break;
      const auto& [a, b, result] = by_rank[static_cast<size_t>(best)];
      size_t out = 0;
      for (size_t i = 0; i < n;) {
        if (i + 1 < n && rank[i] == best && w[i].id == a && w[i + 1].id == b) {
          w[out] = {result, w[i].begin, w[i + 1].end};
          fresh[out++] = 1;
          i += 2;
        } else {
          w[out] = w[i];
          rank[out] = rank[i];
          fresh[out++] = 0;
          ++i;
        }
      }
      n = out;
      for (size_t j = 0; j + 1 < n; ++j)
        if (fresh[j] || fresh[j + 1]) rank[j] = rank_of(j);
    }
    w.resize(n);
  }

  // The same result in O(n log n): symbols in a linked list, candidate pairs in a min-heap of
  // (rank, position). All occurrences of one rank are taken together, in position order, before
  // any pair the round creates, exactly like the rescanning loop.
  void merge_long(std::vector<Piece>& w) const {
    const size_t n = w.size();
    std::vector<int32_t> prev(n), next(n);
    std::vector<uint8_t> alive(n, 1);
    for (size_t i = 0; i < n; ++i) {
      prev[i] = static_cast<int32_t>(i) - 1;
      next[i] = i + 1 < n ? static_cast<int32_t>(i) + 1 : -1;
    }
    struct Candidate {
      int32_t rank;
      int32_t pos;  // left symbol's node
      bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
    int64_t pushes = 0, done = 0;
    auto push_pair = [&](int32_t left) {
      if (left < 0 || next[left] < 0) return;
      if (const Merge* m = find_merge(w[left].id, w[next[left]].id)) {
        heap.push({m->rank, left});
        ++pushes;
      }
    };
    for (size_t i = 0; i + 1 < n; ++i) push_pair(static_cast<int32_t>(i));
    std::vector<int32_t> round;
    while (!heap.empty()) {
      const int32_t rank = heap.top().rank;
      round.clear();
      while (!heap.empty() && heap.top().rank == rank) {
        round.push_back(heap.top().pos);
        heap.pop();
      }
      // Positions come out of the heap in increasing order. A candidate is stale when its left
      // symbol was merged away or changed, or its right neighbour changed.
      const auto& [a, b, result] = by_rank[static_cast<size_t>(rank)];
      std::vector<int32_t> created;
      for (int32_t pos : round) {
        if (!alive[pos] || w[pos].id != a) continue;
        const int32_t right = next[pos];
        if (right < 0 || w[right].id != b) continue;
        w[pos] = {result, w[pos].begin, w[right].end};
        alive[right] = 0;
        next[pos] = next[right];
        if (next[right] >= 0) prev[next[right]] = pos;
        ++done;
        created.push_back(pos);
      }
      for (int32_t pos : created) {
        if (!alive[pos]) continue;
        push_pair(prev[pos]);
        push_pair(pos);
      }
    }
    size_t out = 0;
    for (int32_t i = 0; i >= 0 && static_cast<size_t>(i) < n; i = next[i]) w[out++] = w[i];
    w.resize(out);
    heap_pushes += pushes;
    merges_done += done;
  }

  // force: 0 picks the path by length, 1 forces the long path, -1 the short one.
  void segment_pieces(std::string_view word, std::vector<Piece>& w, int force = 0) const {
    initial_pieces(word, w);
    if (force > 0 || (force == 0 && w.size() > kLongWord))
      merge_long(w);
    else
      merge_short(w);
    // Version 0.1: a final "</w>" piece of its own is dropped (its range is empty anyway).
    if (version_minor == 1 && w.size() > 1 && w.back().begin == w.back().end) w.pop_back();
  }

  // Appends the segmented word, pieces joined by "@@ ".
  void append_word(std::string_view word, std::vector<Piece>& scratch, std::string& out) const {
    segment_pieces(word, scratch);
    for (size_t k = 0; k < scratch.size(); ++k) {
      out.append(word.data() + scratch[k].begin, scratch[k].end - scratch[k].begin);
      if (k + 1 < scratch.size()) out += "@@ ";
    }
  }

  static constexpr size_t kMaxCachedWords = size_t{1} << 20;
  struct Cache {
    std::unordered_map<std::string, std::string, StringHash, std::equal_to<>> words;
    std::vector<Piece> scratch;
  };

  void apply_line(std::string_view line, Cache& cache, std::string& out) const {
    auto ws = [](char c) { return c == '\r' || c == '\n' || c == ' '; };
    size_t lead = 0;
    while (lead < line.size() && ws(line[lead])) ++lead;
    out.append(line.data(), lead);
    if (lead == line.size()) return;  // all whitespace: copied once, as apply_bpe.py does
    size_t end = line.size();
    while (end > lead && ws(line[end - 1])) --end;
    bool first = true;
    size_t i = lead;
    while (i < end) {
      size_t j = i;
      while (j < end && line[j] != ' ') ++j;
      if (j > i) {
        if (!first) out += ' ';
        first = false;
        const std::string_view word = line.substr(i, j - i);
        auto it = cache.words.find(word);
        if (it != cache.words.end()) {
          out += it->second;
        } else if (word.size() > 256) {
          append_word(word, cache.scratch, out);  // long words are not worth caching
        } else {
          std::string segmented;
          append_word(word, cache.scratch, segmented);
          out += segmented;
          if (cache.words.size() >= kMaxCachedWords) cache.words.clear();  // bounded memory on endless input
          cache.words.emplace(std::string(word), std::move(segmented));
        }
      }
      i = j + 1;
    }
    out.append(line.data() + end, line.size() - end);
  }

  // The rest of a line whose earlier words were already written (streaming): it starts with the
  // run of spaces that followed the last written word. That run becomes one space when another
  // word follows, and is copied as it is (the line's trailing whitespace) when none does.
  void apply_line_rest(std::string_view rest, Cache& cache, std::string& out) const {
    size_t lead = 0;
    while (lead < rest.size() && (rest[lead] == ' ' || rest[lead] == '\r' || rest[lead] == '\n')) ++lead;
    if (lead == rest.size()) {
      out.append(rest);
      return;
    }
    out += ' ';
    apply_line(rest.substr(lead), cache, out);
  }

  // Applies to whole lines of valid UTF-8, in parallel over chunks cut after a '\n' (a line end
  // in both modes) when the text is large; caches[t] is thread t's word cache.
  void apply_lines(std::string_view text, text::LineMode mode, std::vector<Cache>& caches, std::string& out) const {
    const int n_threads = text.size() < (1 << 20) ? 1 : std::max(1, omp_get_max_threads());
    if (caches.size() < static_cast<size_t>(n_threads)) caches.resize(static_cast<size_t>(n_threads));
    if (n_threads == 1) {
      out.reserve(out.size() + text.size() * 5 / 4);
      text::for_each_line(text, mode, [&](std::string_view line) { apply_line(line, caches[0], out); });
      return;
    }
    std::vector<size_t> cuts(static_cast<size_t>(n_threads) + 1, text.size());
    cuts[0] = 0;
    for (int t = 1; t < n_threads; ++t) {
      size_t c =
          std::max({cuts[t - 1], size_t{1}, text.size() * static_cast<size_t>(t) / static_cast<size_t>(n_threads)});
      while (c < text.size() && text[c - 1] != '\n') ++c;
      cuts[t] = c;
    }
    std::vector<std::string> outs(static_cast<size_t>(n_threads));
#pragma omp parallel for num_threads(n_threads) schedule(static, 1)
    for (int t = 0; t < n_threads; ++t) {
      std::string& o = outs[t];
      o.reserve((cuts[t + 1] - cuts[t]) * 5 / 4);
      text::for_each_line(text.substr(cuts[t], cuts[t + 1] - cuts[t]), mode,
                          [&](std::string_view line) { apply_line(line, caches[t], o); });
    }
    size_t total = out.size();
    for (const auto& o : outs) total += o.size();
    out.reserve(total);
    for (const auto& o : outs) out += o;
  }
};

namespace {

// Where the first line of s ends (just after its terminator) under mode, or s.size() when it has
// no terminator in s.
size_t first_line_end(std::string_view s, text::LineMode mode) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (mode == text::LineMode::kUniversal) {
      if (s[i] == '\n') return i + 1;
      if (s[i] == '\r') return i + 1 < s.size() && s[i + 1] == '\n' ? i + 2 : i + 1;
    } else if (const size_t b = text::splitlines_break_at(s, i); b > 0) {
      return i + b;
    }
  }
  return s.size();
}

// Just after the last line terminator in s under mode, or 0 when there is none. A '\r' at the
// very end must be excluded by the caller when more input may follow (it may be half of "\r\n").
size_t last_line_end(std::string_view s, text::LineMode mode) {
  for (size_t i = s.size(); i > 0; --i) {
    const auto c = static_cast<unsigned char>(s[i - 1]);
    if (c == '\n' || c == '\r') return i;
    if (mode == text::LineMode::kUniversal) continue;
    if (c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E)) return i;
    if (c == 0x85 && i >= 2 && static_cast<unsigned char>(s[i - 2]) == 0xC2) return i;
    if ((c == 0xA8 || c == 0xA9) && i >= 3 && static_cast<unsigned char>(s[i - 2]) == 0x80 &&
        static_cast<unsigned char>(s[i - 3]) == 0xE2)
      return i;
  }
  return 0;
}

}  // namespace

SennrichBpe::SennrichBpe(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SennrichBpe::SennrichBpe(SennrichBpe&&) noexcept = default;
SennrichBpe& SennrichBpe::operator=(SennrichBpe&&) noexcept = default;
SennrichBpe::~SennrichBpe() = default;

SennrichBpe SennrichBpe::from_codes(std::string_view codes, const std::string& name, int64_t max_merges) {
  if (auto bad = find_invalid_utf8(codes)) fail_file(name, "{}: invalid UTF-8 at byte offset {}", name, *bad);
  if (codes.empty()) fail_file(name, "{}:1: empty codes file (expected '#version: 0.2' and one merge per line)", name);
  auto impl = std::make_unique<Impl>();
  // The first line, as Python's readline() on a codecs reader sees it.
  size_t first_end = 0;
  while (first_end < codes.size()) {
    const size_t b = text::splitlines_break_at(codes, first_end);
    if (b > 0) {
      first_end += b;
      break;
    }
    ++first_end;
  }
  std::string_view rest = codes;
  int64_t line_offset = 1;  // file line of the first merge line
  const std::string_view first_line = codes.substr(0, first_end);
  if (first_line.starts_with("#version:")) {
    // Version: the last whitespace-separated word, trailing ".0" groups removed ("0.2.0" = "0.2").
    std::string_view v = first_line;
    auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
    while (!v.empty() && space(v.back())) v.remove_suffix(1);
    size_t s = v.size();
    while (s > 0 && !space(v[s - 1])) --s;
    std::string version(v.substr(s));
    while (true) {
      const size_t dot = version.rfind('.');
      if (dot == std::string::npos || dot + 1 == version.size() ||
          version.find_first_not_of('0', dot + 1) != std::string::npos)
        break;
      version.resize(dot);
    }
    if (version == "0.2") {
      impl->version_minor = 2;
    } else if (version == "0.1") {
      impl->version_minor = 1;
    } else if (first_line.find("byte") != std::string_view::npos) {
      fail_file(name, "{}:1: byte-level codes ('{}') are not Sennrich character BPE codes", name, v);
    } else {
      fail_unsupported(name, "{}:1: unsupported codes version in '{}' (expected '#version: 0.2')", name, v);
    }
    rest = codes.substr(first_end);
    line_offset = 2;
  } else {
    impl->version_minor = 1;  // subword-nmt reads a file without a header as version 0.1
  }
  if (impl->version_minor == 1) impl->end_of_word_id = impl->intern(kEndOfWord);
  while (!rest.empty() && rest.back() == '\n') rest.remove_suffix(1);
  std::unordered_map<uint64_t, int64_t> line_of;
  if (!rest.empty()) {
    int64_t index = 0;
    size_t start = 0;
    while (start <= rest.size()) {
      if (max_merges >= 0 && index >= max_merges) break;
      size_t end = rest.find('\n', start);
      if (end == std::string_view::npos) end = rest.size();
      std::string_view item = rest.substr(start, end - start);
      const int64_t line = index + line_offset;
      auto strip = [](char c) { return c == '\r' || c == '\n' || c == ' '; };
      while (!item.empty() && strip(item.front())) item.remove_prefix(1);
      while (!item.empty() && strip(item.back())) item.remove_suffix(1);
      const size_t sp = item.find(' ');
      if (item.empty() || sp == std::string_view::npos || item.find(' ', sp + 1) != std::string_view::npos)
        fail_file(name, "{}:{}: expected two symbols separated by one space, got '{}'", name, line, item);
      impl->add_merge(std::string(item.substr(0, sp)), std::string(item.substr(sp + 1)), name, line, line_of);
      ++index;
      start = end + 1;
    }
  }
  impl->produced.clear();
  impl->finish();
  return SennrichBpe(std::move(impl));
}

SennrichBpe SennrichBpe::load(const std::string& path, int64_t max_merges) {
  return from_codes(read_file(path), path, max_merges);
}

SennrichBpe SennrichBpe::from_merges(const std::vector<std::pair<std::string, std::string>>& merges,
                                     const std::string& name) {
  return from_codes(format_bpe_codes(merges), name);
}

std::vector<std::string> SennrichBpe::segment(std::string_view word) const {
  std::vector<Piece> w;
  impl_->segment_pieces(word, w);
  std::vector<std::string> out;
  out.reserve(w.size());
  for (const Piece& p : w) out.emplace_back(word.substr(p.begin, p.end - p.begin));
  return out;
}

std::vector<std::string> SennrichBpe::segment_for_testing(std::string_view word, bool long_path) const {
  std::vector<Piece> w;
  impl_->segment_pieces(word, w, long_path ? 1 : -1);
  std::vector<std::string> out;
  for (const Piece& p : w) out.emplace_back(word.substr(p.begin, p.end - p.begin));
  return out;
}

std::vector<int32_t> SennrichBpe::segment_ids(std::string_view word) const {
  std::vector<Piece> w;
  impl_->segment_pieces(word, w);
  std::vector<int32_t> out;
  out.reserve(w.size());
  for (const Piece& p : w) out.push_back(p.id);
  return out;
}

void SennrichBpe::segment_pieces(std::string_view word, std::vector<Piece>& out) const {
  impl_->segment_pieces(word, out);
}

std::vector<std::pair<std::string, std::string>> SennrichBpe::merges() const {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(impl_->by_rank.size());
  for (const auto& [a, b, r] : impl_->by_rank) out.emplace_back(impl_->symbols[a], impl_->symbols[b]);
  return out;
}

const std::vector<std::string>& SennrichBpe::symbols() const { return impl_->symbols; }
int64_t SennrichBpe::num_merges() const { return impl_->n_merges; }
int SennrichBpe::version_minor() const { return impl_->version_minor; }

std::string SennrichBpe::apply_line(std::string_view line) const {
  Impl::Cache cache;
  std::string out;
  impl_->apply_line(line, cache, out);
  return out;
}

std::string SennrichBpe::apply_text(std::string_view text, text::LineMode mode, const std::string& name) const {
  if (auto bad = find_invalid_utf8(text)) fail_file(name, "{}: invalid UTF-8 at byte offset {}", name, *bad);
  std::vector<Impl::Cache> caches;
  std::string out;
  impl_->apply_lines(text, mode, caches, out);
  return out;
}

void SennrichBpe::apply_stream(const std::function<size_t(char*, size_t)>& read,
                               const std::function<void(std::string_view)>& write, text::LineMode mode,
                               const std::string& name, size_t block_size) const {
  block_size = std::max<size_t>(block_size, 1);
  std::vector<Impl::Cache> caches(1);
  std::string buffer;       // input not yet applied
  uint64_t base = 0;        // input offset of buffer[0]
  bool continuing = false;  // buffer[0] continues a line whose earlier words were written
  std::string out;
  auto check = [&](std::string_view part, size_t offset) {
    if (auto bad = find_invalid_utf8(part))
      fail_file(name, "{}: invalid UTF-8 at byte offset {}", name, base + offset + *bad);
  };
  for (bool eof = false; !eof;) {
    const size_t had = buffer.size();
    buffer.resize(had + block_size);
    const size_t got = read(buffer.data() + had, block_size);
    buffer.resize(had + got);
    eof = got == 0;
    const std::string_view buf(buffer);
    // A '\r' at the end may be the first half of "\r\n": it waits for the next block.
    const size_t limit = !eof && !buf.empty() && buf.back() == '\r' ? buf.size() - 1 : buf.size();
    size_t done = eof ? buf.size() : last_line_end(buf.substr(0, limit), mode);
    out.clear();
    if (done > 0) {
      // Whole lines; the first one may be the rest of a line begun in an earlier block.
      check(buf.substr(0, done), 0);
      size_t start = 0;
      if (continuing) {
        start = first_line_end(buf.substr(0, done), mode);
        text::for_each_line(buf.substr(0, start), mode,
                            [&](std::string_view rest) { impl_->apply_line_rest(rest, caches[0], out); });
        continuing = false;
      }
      impl_->apply_lines(buf.substr(start, done - start), mode, caches, out);
    }
    if (!eof) {
      // The unfinished line: apply it up to the end of its last complete word (a word followed by
      // a space); the rest, from that space on, waits for more input.
      size_t cut = limit;
      while (cut > done && !(buf[cut - 1] == ' ' && cut - 1 > done && buf[cut - 2] != ' ')) --cut;
      if (cut > done) {
        const std::string_view part = buf.substr(done, cut - 1 - done);
        check(part, done);
        if (continuing)
          impl_->apply_line_rest(part, caches[0], out);
        else
          impl_->apply_line(part, caches[0], out);
        continuing = true;
        done = cut - 1;
      }
    }
    if (!out.empty()) write(out);
    buffer.erase(0, done);
    base += done;
  }
}

SennrichBpe::Stats SennrichBpe::stats() const { return {impl_->heap_pushes.load(), impl_->merges_done.load()}; }
void SennrichBpe::reset_stats() const {
  impl_->heap_pushes = 0;
  impl_->merges_done = 0;
}

}  // namespace tformer
