// Sennrich BPE segmentation of one word: its characters (the last with "</w>"), then apply_bpe.py's
// merge loop, by rescanning for short words and through a heap and a linked list for long ones.
#include <algorithm>
#include <cstdint>
#include <queue>
#include <string>
#include <string_view>
#include <vector>

#include "core/utf8.h"
#include "tokenizer/sennrich_bpe.h"
#include "tokenizer/sennrich_bpe_impl.h"

namespace tformer {

// Initial symbols of a word (no spaces): its characters, the last one with "</w>".
void SennrichBpe::Impl::initial_pieces(std::string_view word, std::vector<Piece>& out) const {
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
void SennrichBpe::Impl::merge_short(std::vector<Piece>& w) const {
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
void SennrichBpe::Impl::merge_long(std::vector<Piece>& w) const {
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
void SennrichBpe::Impl::segment_pieces(std::string_view word, std::vector<Piece>& w, int force) const {
  initial_pieces(word, w);
  if (force > 0 || (force == 0 && w.size() > kLongWord))
    merge_long(w);
  else
    merge_short(w);
  // Version 0.1: a final "</w>" piece of its own is dropped (its range is empty anyway).
  if (version_minor == 1 && w.size() > 1 && w.back().begin == w.back().end) w.pop_back();
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
  out.reserve(w.size());
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

SennrichBpe::Stats SennrichBpe::stats() const { return {impl_->heap_pushes.load(), impl_->merges_done.load()}; }
void SennrichBpe::reset_stats() const {
  impl_->heap_pushes = 0;
  impl_->merges_done = 0;
}

}  // namespace tformer
