// Byte-level BPE encoding: GPT-2's pre-tokenizer splits the text into pieces; a piece that is a token
// is one id, any other merges its adjacent pairs, the lowest resulting id first, by a scan (short
// pieces) or a heap (long ones). Recent pieces are cached per call and thread; a long text is
// split over threads at cuts where the pre-tokenizer cannot join two pieces.
#include <omp.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstring>
#include <functional>
#include <queue>
#include <string>
#include <string_view>
#include <vector>

#include "core/hash.h"
#include "tokenizer/byte_bpe.h"
#include "tokenizer/byte_bpe_tables.h"
#include "tokenizer/gpt2_pretokenize.h"

namespace tformer {
namespace {

// Pieces up to this many bytes merge by a plain scan; longer ones through the heap, and the
// longest through buckets of equal rank (linear time).
constexpr size_t kScanMaxBytes = 24;
constexpr size_t kHeapMaxBytes = 4096;
// Pieces longer than this are not cached (long runs are rare and would fill the cache).
constexpr size_t kCacheMaxPieceBytes = 256;
constexpr size_t kCacheSlots = size_t{1} << 14;
// encode() splits a stretch of text over threads when it is at least this long.
constexpr size_t kParallelMinBytes = size_t{4} << 20;
constexpr size_t kParallelChunkBytes = size_t{1} << 20;

// The parts of a piece as a doubly linked list, for the heap and the rank buckets: a part absorbs
// its right neighbour when they merge, so a part's index is its starting position (which orders
// ties leftmost first). A queued pair goes stale when either part changes; it is live iff its part
// and the part's current right neighbour still have the ids it was queued with (then its rank is
// still right).
// Calls f(piece) for each piece of text under pattern p (f inlined for the encoder's own use).
template <typename F>
void pieces_by_pattern(ByteBpeTokenizer::Pattern p, std::string_view text, F&& f) {
  switch (p) {
    case ByteBpeTokenizer::Pattern::Gpt2:
      Gpt2PreTokenizer::instance().for_each_piece(text, f);
      break;
    case ByteBpeTokenizer::Pattern::Cl100k:
      Gpt2PreTokenizer::cl100k().for_each_piece(text, f);
      break;
    case ByteBpeTokenizer::Pattern::O200k:
      Gpt2PreTokenizer::o200k().for_each_piece(text, f);
      break;
    case ByteBpeTokenizer::Pattern::LlamaCppDefault:
      LlamaCppDefaultPreTokenizer::instance().for_each_piece(text, f);
      break;
  }
}

class PartList {
 public:
  explicit PartList(std::vector<TokenId>& parts)
      : parts_(parts), prev_(parts.size()), next_(parts.size()), alive_(parts.size(), 1) {
    const int32_t n = static_cast<int32_t>(parts.size());
    for (int32_t i = 0; i < n; ++i) {
      prev_[i] = i - 1;
      next_[i] = i + 1 < n ? i + 1 : -1;
    }
  }
  int32_t size() const { return static_cast<int32_t>(parts_.size()); }
  // Calls queue(pos, left, right) for the pair starting at pos, when there is one.
  template <typename Queue>
  void offer(int32_t pos, Queue&& queue) const {
    if (pos >= 0 && next_[pos] >= 0) queue(pos, parts_[pos], parts_[next_[pos]]);
  }
  bool live(int32_t pos, TokenId left, TokenId right) const {
    return alive_[pos] && next_[pos] >= 0 && parts_[pos] == left && parts_[next_[pos]] == right;
  }
  // Merges the pair at pos into `merged`; then offers the two pairs that changed.
  template <typename Queue>
  void merge(int32_t pos, TokenId merged, Queue&& queue) {
    const int32_t right = next_[pos];
    parts_[pos] = merged;
    alive_[right] = 0;
    next_[pos] = next_[right];
    if (next_[right] >= 0) prev_[next_[right]] = pos;
    offer(prev_[pos], queue);
    offer(pos, queue);
  }
  // Leaves the surviving parts, in order, in the vector.
  void compact() {
    size_t w = 0;
    for (int32_t i = 0; i >= 0 && i < size(); i = next_[i]) parts_[w++] = parts_[i];
    parts_.resize(w);
  }

 private:
  std::vector<TokenId>& parts_;
  std::vector<int32_t> prev_, next_;
  std::vector<uint8_t> alive_;
};

}  // namespace

// Direct-mapped: a piece's hash picks one slot, and a new piece overwrites whatever was there, so
// memory stays bounded without an eviction policy. Keys and ids live in two arenas that are reset
// (all slots forgotten, by a generation number) when they grow past a bound.
class ByteBpeTokenizer::Cache {
 public:
  Cache() : slots_(kCacheSlots) {}
  bool find(std::string_view piece, uint64_t hash, std::vector<TokenId>& out) const {
    const Slot& s = slots_[hash & (kCacheSlots - 1)];
    if (s.generation != generation_ || s.hash != hash || s.key_len != piece.size() ||
        std::memcmp(keys_.data() + s.key_off, piece.data(), piece.size()) != 0)
      return false;
    out.insert(out.end(), ids_.begin() + s.ids_off, ids_.begin() + s.ids_off + s.ids_len);
    return true;
  }
  void insert(std::string_view piece, uint64_t hash, const TokenId* ids, size_t n) {
    if (keys_.size() > (size_t{16} << 20) || ids_.size() > (size_t{4} << 20)) {
      keys_.clear();
      ids_.clear();
      ++generation_;
    }
    Slot& s = slots_[hash & (kCacheSlots - 1)];
    s = {hash,
         static_cast<uint32_t>(keys_.size()),
         static_cast<uint32_t>(piece.size()),
         static_cast<uint32_t>(ids_.size()),
         static_cast<uint32_t>(n),
         generation_};
    keys_.append(piece);
    ids_.insert(ids_.end(), ids, ids + n);
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_off = 0, key_len = 0, ids_off = 0, ids_len = 0;
    uint32_t generation = 0;
  };
  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<TokenId> ids_;
  uint32_t generation_ = 1;
};

void ByteBpeTokenizer::merge_scan(std::vector<TokenId>& parts) const {
  // rank[i]: the id parts[i] + parts[i+1] would merge into (INT32_MAX: none). After a merge at i
  // only rank[i-1] and rank[i] change.
  if (parts.size() < 2) return;
  constexpr TokenId kNone = INT32_MAX;
  const auto pair_rank = [&](size_t i) {
    const TokenId merged = tables_->pairs.find(parts[i], parts[i + 1]);
    return merged >= 0 ? merged : kNone;
  };
  std::array<TokenId, kScanMaxBytes> rank_buffer;
  std::vector<TokenId> rank_heap;
  TokenId* rank = rank_buffer.data();
  if (parts.size() > rank_buffer.size()) {
    rank_heap.resize(parts.size());
    rank = rank_heap.data();
  }
  size_t n = parts.size();
  for (size_t i = 0; i + 1 < n; ++i) rank[i] = pair_rank(i);
  while (n >= 2) {
    TokenId best = kNone;
    size_t at = 0;
    for (size_t i = 0; i + 1 < n; ++i) {
      if (rank[i] < best) {  // strict: the leftmost of equal ranks wins
        best = rank[i];
        at = i;
      }
    }
    if (best == kNone) break;
    parts[at] = best;
    for (size_t i = at + 1; i + 1 < n; ++i) parts[i] = parts[i + 1];
    for (size_t i = at + 1; i + 2 < n; ++i) rank[i] = rank[i + 1];
    --n;
    if (at + 1 < n) rank[at] = pair_rank(at);
    if (at > 0) rank[at - 1] = pair_rank(at - 1);
  }
  parts.resize(n);
}

void ByteBpeTokenizer::merge_heap(std::vector<TokenId>& parts) const {
  // The lowest rank first, the leftmost of equal ranks (PartList).
  PartList list(parts);
  struct Candidate {
    TokenId rank;
    int32_t pos;
    TokenId left, right;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  const auto queue = [&](int32_t pos, TokenId left, TokenId right) {
    if (const TokenId merged = tables_->pairs.find(left, right); merged >= 0) heap.push({merged, pos, left, right});
  };
  for (int32_t i = 0; i + 1 < list.size(); ++i) list.offer(i, queue);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    if (list.live(c.pos, c.left, c.right)) list.merge(c.pos, c.rank, queue);
  }
  list.compact();
}

void ByteBpeTokenizer::merge_buckets(std::vector<TokenId>& parts) const {
  // The heap replaced by one bucket per rank, taken in increasing rank, each bucket leftmost first.
  // This is the heap's order as long as no merge creates a pair of lower rank than its own: then
  // each bucket is complete when its turn comes. A merge's id is larger than the ids it joins, but
  // the pair table holds every split of every token, and some tokens have a split with a part of
  // higher rank than themselves (in cl100k_base, tens of thousands). No such pair has been seen to
  // form in a real encoding (a token is its own BPE encoding: from_tiktoken checks it), but
  // nothing guarantees it for every vocabulary, so if one forms the piece is redone by the heap.
  // Entries arrive in position order within one bucket's pass but passes interleave, so a bucket
  // is sorted by position when it is not already. The time is linear in the piece plus the
  // number of ranks (one array of that size, which is why shorter pieces take the heap).
  const std::vector<TokenId> original = parts;
  PartList list(parts);
  struct Entry {
    int32_t pos;
    TokenId left, right;
    int32_t link;  // the next entry of the same bucket, -1 at the end
  };
  std::vector<Entry> entries;
  entries.reserve(parts.size() * 3);  // n - 1 pairs at the start, at most two more per merge
  const size_t ranks = tokens_.size();
  std::vector<int32_t> head(ranks, -1), tail(ranks, -1);
  TokenId lowest = static_cast<TokenId>(ranks);
  size_t current = 0;  // the bucket being merged
  bool out_of_order = false;
  const auto queue = [&](int32_t pos, TokenId left, TokenId right) {
    const TokenId merged = tables_->pairs.find(left, right);
    if (merged < 0) return;
    if (static_cast<size_t>(merged) < current) out_of_order = true;
    const int32_t e = static_cast<int32_t>(entries.size());
    entries.push_back({pos, left, right, -1});
    (tail[merged] < 0 ? head[merged] : entries[tail[merged]].link) = e;
    tail[merged] = e;
    lowest = std::min(lowest, merged);
  };
  for (int32_t i = 0; i + 1 < list.size(); ++i) list.offer(i, queue);
  std::vector<Entry> bucket;
  for (size_t r = static_cast<size_t>(lowest); r < ranks && !out_of_order; ++r) {
    if (head[r] < 0) continue;
    current = r;
    // Merges during this bucket's pass queue pairs in later buckets only, so its list stays as it is.
    bool sorted = true;
    for (int32_t e = head[r]; sorted && entries[e].link >= 0; e = entries[e].link)
      sorted = entries[e].pos < entries[entries[e].link].pos;
    const auto apply = [&](const Entry& c) {
      if (list.live(c.pos, c.left, c.right)) list.merge(c.pos, static_cast<TokenId>(r), queue);
    };
    if (sorted) {
      for (int32_t e = head[r]; e >= 0; e = entries[e].link) apply(Entry(entries[e]));
      continue;
    }
    bucket.clear();
    for (int32_t e = head[r]; e >= 0; e = entries[e].link) bucket.push_back(entries[e]);
    std::sort(bucket.begin(), bucket.end(), [](const Entry& a, const Entry& b) { return a.pos < b.pos; });
    for (const Entry& c : bucket) apply(c);
  }
  if (out_of_order) {
    parts = original;
    merge_heap(parts);
    return;
  }
  list.compact();
}

std::vector<TokenId> ByteBpeTokenizer::encode_piece(std::string_view piece, int algorithm) const {
  if (piece.empty()) return {};
  if (const TokenId whole = tables_->piece.find(piece, tokens_); whole >= 0) return {whole};
  std::vector<TokenId> parts(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) parts[i] = id_of_byte_[static_cast<unsigned char>(piece[i])];
  merge(parts, algorithm);
  return parts;
}

void ByteBpeTokenizer::merge(std::vector<TokenId>& parts, int algorithm) const {
  if (algorithm == 0) algorithm = parts.size() <= kScanMaxBytes ? 1 : parts.size() <= kHeapMaxBytes ? 2 : 3;
  if (algorithm == 1)
    merge_scan(parts);
  else if (algorithm == 2)
    merge_heap(parts);
  else
    merge_buckets(parts);
}

void ByteBpeTokenizer::encode_chunk(std::string_view text, Cache& cache, std::vector<TokenId>& out) const {
  std::vector<TokenId> parts;
  const auto each = [&](std::string_view piece) {
    if (piece.size() == 1) {
      out.push_back(id_of_byte_[static_cast<unsigned char>(piece[0])]);
      return;
    }
    const uint64_t hash = hash64(piece);
    if (const TokenId whole = tables_->piece.find(piece, hash, tokens_); whole >= 0) {
      out.push_back(whole);
      return;
    }
    const bool cacheable = piece.size() <= kCacheMaxPieceBytes;
    if (cacheable && cache.find(piece, hash, out)) return;
    parts.resize(piece.size());
    for (size_t i = 0; i < piece.size(); ++i) parts[i] = id_of_byte_[static_cast<unsigned char>(piece[i])];
    merge(parts, 0);
    out.insert(out.end(), parts.begin(), parts.end());
    if (cacheable) cache.insert(piece, hash, parts.data(), parts.size());
  };
  pieces_by_pattern(pattern_, text, each);
}

void ByteBpeTokenizer::for_each_piece(Pattern p, std::string_view text,
                                      const std::function<void(std::string_view)>& f) {
  pieces_by_pattern(p, text, f);
}

// A cut at p is safe when text[p-1] is '\n' and text[p-2], text[p] are printable ASCII other than
// the space and '/': then a piece ends at p, and the pattern's matching after p does not depend on
// what came before (the patterns look ahead but never behind). A piece ends at p because in GPT-2's
// pattern and llama.cpp's default chain no piece holds a newline together with a non-space
// character (so the piece before is exactly "\n"), and in cl100k's and o200k's the only pieces
// that run on past a newline are a punctuation run's trailing [\r\n]* (cl100k) or [\r\n/]* (o200k):
// these stop before text[p], which is neither a newline nor '/' (".\n/" is one o200k piece).
static size_t next_safe_cut(std::string_view text, size_t from) {
  const auto printable = [](char c) { return c > ' ' && c < 0x7F && c != '/'; };
  size_t search = from == 0 ? 0 : from - 1;
  while (true) {
    const size_t newline = text.find('\n', search);
    if (newline == std::string_view::npos) return text.size();
    const size_t cut = newline + 1;
    if (newline >= 1 && cut < text.size() && printable(text[newline - 1]) && printable(text[cut])) return cut;
    search = cut;
  }
}

void ByteBpeTokenizer::encode_stretch(std::string_view text, std::vector<TokenId>& out) const {
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (threads <= 1 || text.size() < kParallelMinBytes) {
    Cache cache;
    encode_chunk(text, cache, out);
    return;
  }
  std::vector<size_t> cuts{0};
  while (cuts.back() < text.size()) cuts.push_back(next_safe_cut(text, cuts.back() + kParallelChunkBytes));
  const int64_t n_chunks = static_cast<int64_t>(cuts.size()) - 1;
  std::vector<std::vector<TokenId>> parts(static_cast<size_t>(n_chunks));
#pragma omp parallel num_threads(threads)
  {
    Cache cache;
#pragma omp for schedule(dynamic, 1)
    for (int64_t c = 0; c < n_chunks; ++c) {
      parts[c].reserve((cuts[c + 1] - cuts[c]) / 3);
      encode_chunk(text.substr(cuts[c], cuts[c + 1] - cuts[c]), cache, parts[c]);
    }
  }
  size_t total = out.size();
  for (const auto& p : parts) total += p.size();
  out.reserve(total);
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
}

std::vector<TokenId> ByteBpeTokenizer::encode_ordinary(std::string_view text) const {
  std::vector<TokenId> out;
  out.reserve(text.size() / 3);
  encode_stretch(text, out);
  return out;
}

std::vector<TokenId> ByteBpeTokenizer::encode(std::string_view text, bool allow_special) const {
  if (!allow_special || specials_.empty()) return encode_ordinary(text);
  std::vector<TokenId> out;
  out.reserve(text.size() / 3);
  size_t at = 0;
  while (at < text.size()) {
    // The earliest special token from `at`; the longest one when several start there.
    size_t best = std::string_view::npos, best_len = 0;
    TokenId best_id = -1;
    for (const auto& [special, id] : specials_) {
      const size_t p = text.find(special, at);
      if (p < best || (p == best && p != std::string_view::npos && special.size() > best_len)) {
        best = p;
        best_len = special.size();
        best_id = id;
      }
    }
    if (best == std::string_view::npos) break;
    encode_stretch(text.substr(at, best - at), out);
    out.push_back(best_id);
    at = best + best_len;
  }
  if (at < text.size()) encode_stretch(text.substr(at), out);
  return out;
}

}  // namespace tformer
