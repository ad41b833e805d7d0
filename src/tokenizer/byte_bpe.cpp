#include "tokenizer/byte_bpe.h"

#include <omp.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <filesystem>
#include <functional>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "core/file_io.h"
#include "core/hash.h"
#include "core/utf8.h"
#include "tokenizer/gpt2_pretokenize.h"

namespace tformer {
namespace {

// Pieces up to this many bytes merge by a plain scan; longer ones through the heap.
constexpr size_t kScanMaxBytes = 24;
// Pieces longer than this are not cached (long runs are rare and would fill the cache).
constexpr size_t kCacheMaxPieceBytes = 256;
constexpr size_t kCacheSlots = size_t{1} << 14;
// encode() splits a stretch of text over threads when it is at least this long.
constexpr size_t kParallelMinBytes = size_t{4} << 20;
constexpr size_t kParallelChunkBytes = size_t{1} << 20;

struct ByteUnicodeTables {
  std::array<std::string, 256> byte_to_text;
  std::array<int, 512> code_point_to_byte;  // -1: not in the alphabet (every code point used is < 512)
  ByteUnicodeTables() {
    code_point_to_byte.fill(-1);
    const auto self = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = self(b) ? static_cast<uint32_t>(b) : next++;
      append_utf8(byte_to_text[b], cp);
      code_point_to_byte[cp] = b;
    }
  }
};

const ByteUnicodeTables& byte_unicode() {
  static const ByteUnicodeTables tables;
  return tables;
}

std::string spelled(std::string_view bytes) { return gpt2_bytes_to_unicode(bytes); }

}  // namespace

const std::array<std::string, 256>& gpt2_byte_to_unicode() { return byte_unicode().byte_to_text; }

std::optional<std::string> gpt2_unicode_to_bytes(std::string_view s) {
  const auto& table = byte_unicode().code_point_to_byte;
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const int len = utf8_char_length(s.substr(i));
    if (len <= 0 || len > 2) return std::nullopt;  // the alphabet is U+0021..U+0143: one or two bytes
    const uint32_t cp = next_code_point(s, i);
    if (cp >= table.size() || table[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(table[cp]));
  }
  return out;
}

std::string gpt2_bytes_to_unicode(std::string_view bytes) {
  const auto& table = gpt2_byte_to_unicode();
  std::string out;
  for (char c : bytes) out += table[static_cast<unsigned char>(c)];
  return out;
}

// ---------------------------------------------------------------------------------------------
// Lookup tables

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

struct ByteBpeTokenizer::Tables {
  // Every ordinary token's bytes -> id (the whole-piece shortcut).
  PieceTable piece;
  // Every split of every ordinary token into two ordinary tokens: tiktoken merges any adjacent
  // pair whose concatenation is a token, not only the pairs listed as merges.
  PairTable pairs;
};

ByteBpeTokenizer::~ByteBpeTokenizer() = default;
ByteBpeTokenizer::ByteBpeTokenizer(ByteBpeTokenizer&&) noexcept = default;
ByteBpeTokenizer& ByteBpeTokenizer::operator=(ByteBpeTokenizer&&) noexcept = default;

ByteBpeTokenizer::ByteBpeTokenizer(const std::array<unsigned char, 256>& byte_of_id, std::vector<Merge> merges,
                                   std::map<std::string, TokenId> specials)
    : byte_of_id_(byte_of_id), merges_(std::move(merges)), specials_(std::move(specials)) {
  id_of_byte_.fill(-1);
  for (int id = 0; id < 256; ++id) {
    TokenId& slot = id_of_byte_[byte_of_id_[id]];
    if (slot >= 0)
      fail_input(fmt::format("byte 0x{:02x}", byte_of_id_[id]), "byte-bpe: byte 0x{:02x} has two ids, {} and {}",
                 byte_of_id_[id], slot, id);
    slot = id;
  }
  const size_t n_ordinary = 256 + merges_.size();
  TF_CHECK(n_ordinary + specials_.size() < static_cast<size_t>(INT32_MAX), "byte-bpe: vocabulary too large");
  tables_ = std::make_unique<Tables>();
  tokens_.reserve(n_ordinary + specials_.size());  // no reallocation below: views into it stay valid
  for (int id = 0; id < 256; ++id) tokens_.emplace_back(1, static_cast<char>(byte_of_id_[id]));
  std::unordered_map<std::string_view, TokenId> made;  // token bytes -> id, to find duplicates
  for (int id = 0; id < 256; ++id) made.emplace(tokens_[id], id);
  for (size_t i = 0; i < merges_.size(); ++i) {
    const auto [left, right] = merges_[i];
    const TokenId id = static_cast<TokenId>(256 + i);
    if (left < 0 || left >= id || right < 0 || right >= id)
      fail_input(fmt::format("merge {}", i),
                 "byte-bpe: merge {} ({} {}) uses an id that is not yet a token (ids below {})", i, left, right, id);
    tokens_.push_back(tokens_[left] + tokens_[right]);
  }
  // (tokens_ no longer reallocates: the views in `made` stay valid.)
  for (size_t id = 256; id < n_ordinary; ++id) {
    auto [it, inserted] = made.emplace(tokens_[id], static_cast<TokenId>(id));
    if (!inserted)
      fail_input(fmt::format("merge {}", id - 256), "byte-bpe: merge {} makes '{}', which token {} already is",
                 id - 256, spelled(tokens_[id]), it->second);
  }
  tables_->piece.build(tokens_, n_ordinary);
  tokens_.resize(n_ordinary + specials_.size());
  for (const auto& [text, id] : specials_) {
    if (text.empty()) fail_input("special_tokens", "byte-bpe: a special token has empty text");
    if (id < static_cast<TokenId>(n_ordinary) || static_cast<size_t>(id) >= tokens_.size() || !tokens_[id].empty())
      fail_input(text, "byte-bpe: special token '{}' has id {}; special tokens take ids {}..{}, one each", text, id,
                 n_ordinary, tokens_.size() - 1);
    tokens_[id] = text;
  }
  std::vector<std::pair<uint64_t, TokenId>> pairs;
  for (size_t id = 256; id < n_ordinary; ++id) {
    const std::string_view t = tokens_[id];
    for (size_t k = 1; k < t.size(); ++k) {
      const TokenId a = tables_->piece.find(t.substr(0, k), tokens_);
      if (a < 0) continue;
      const TokenId b = tables_->piece.find(t.substr(k), tokens_);
      if (b < 0) continue;
      pairs.emplace_back(PairTable::pack(a, b), static_cast<TokenId>(id));
    }
  }
  tables_->pairs.build(pairs);
}

const std::string& ByteBpeTokenizer::token_bytes(TokenId id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size()) [[unlikely]]
    fail_input(fmt::format("token id {}", id), "byte-bpe: token id {} is outside the vocabulary (ids 0..{})", id,
               static_cast<int64_t>(tokens_.size()) - 1);
  return tokens_[static_cast<size_t>(id)];
}

void ByteBpeTokenizer::append_token_bytes(TokenId id, std::string& out) const { out += token_bytes(id); }

// ---------------------------------------------------------------------------------------------
// Encoding

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
  // A doubly linked list over the parts; a part absorbs its right neighbour when they merge, so a
  // part's index is its starting position and orders ties leftmost first. Heap entries go stale
  // when either part changes; an entry is live iff its part and the part's current right
  // neighbour still have the ids it was pushed with (then its rank is still right).
  const int32_t n = static_cast<int32_t>(parts.size());
  std::vector<int32_t> prev(parts.size()), next(parts.size());
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    TokenId rank;
    int32_t pos;
    TokenId left, right;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  const auto push = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    const TokenId merged = tables_->pairs.find(parts[pos], parts[next[pos]]);
    if (merged >= 0) heap.push({merged, pos, parts[pos], parts[next[pos]]});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  std::vector<bool> alive(parts.size(), true);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int32_t right = next[c.pos];
    if (!alive[c.pos] || right < 0 || parts[c.pos] != c.left || parts[right] != c.right) continue;
    parts[c.pos] = c.rank;
    alive[right] = false;
    next[c.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  size_t w = 0;
  for (int32_t i = 0; i >= 0 && i < n; i = next[i]) parts[w++] = parts[i];
  parts.resize(w);
}

std::vector<TokenId> ByteBpeTokenizer::encode_piece(std::string_view piece, int algorithm) const {
  if (piece.empty()) return {};
  if (const TokenId whole = tables_->piece.find(piece, tokens_); whole >= 0) return {whole};
  std::vector<TokenId> parts(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) parts[i] = id_of_byte_[static_cast<unsigned char>(piece[i])];
  const bool scan = algorithm == 1 || (algorithm == 0 && piece.size() <= kScanMaxBytes);
  if (scan)
    merge_scan(parts);
  else
    merge_heap(parts);
  return parts;
}

void ByteBpeTokenizer::encode_chunk(std::string_view text, Cache& cache, std::vector<TokenId>& out) const {
  std::vector<TokenId> parts;
  Gpt2PreTokenizer::instance().for_each_piece(text, [&](std::string_view piece) {
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
    if (piece.size() <= kScanMaxBytes)
      merge_scan(parts);
    else
      merge_heap(parts);
    out.insert(out.end(), parts.begin(), parts.end());
    if (cacheable) cache.insert(piece, hash, parts.data(), parts.size());
  });
}

// A cut at p is safe when text[p-1] is '\n' and text[p-2], text[p] are printable ASCII other than
// the space: no piece contains a newline together with a non-space character, so the piece before
// is exactly "\n" (ending at p) and the pattern's matching after p does not depend on what came
// before (the pattern looks ahead but never behind).
static size_t next_safe_cut(std::string_view text, size_t from) {
  const auto printable = [](char c) { return c > ' ' && c < 0x7F; };
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

// ---------------------------------------------------------------------------------------------
// Files

ByteBpeTokenizer ByteBpeTokenizer::load_gpt2(const std::string& encoder_path, const std::string& vocab_path) {
  // encoder.json: {"token": id}
  nlohmann::json encoder;
  try {
    encoder = nlohmann::json::parse(read_file(encoder_path));
  } catch (const nlohmann::json::exception& e) {
    fail_file(encoder_path, "{}: not valid JSON: {}", encoder_path, e.what());
  }
  if (!encoder.is_object()) fail_file(encoder_path, "{}: expected a JSON object {{\"token\": id, ...}}", encoder_path);
  std::unordered_map<std::string, TokenId> id_of;  // token bytes -> id
  id_of.reserve(encoder.size());
  std::vector<std::optional<std::string>> bytes_of(encoder.size());  // id -> token bytes
  for (const auto& [key, value] : encoder.items()) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() >= INT32_MAX)
      fail_file(key, "{}: token \"{}\" has id {}, expected an integer 0..2^31-2", encoder_path, key, value.dump());
    const TokenId id = value.get<TokenId>();
    if (static_cast<size_t>(id) >= encoder.size())
      fail_file(key, "{}: token \"{}\" has id {}, outside the vocabulary: the {} tokens must have ids 0..{}",
                encoder_path, key, id, encoder.size(), encoder.size() - 1);
    std::optional<std::string> bytes = gpt2_unicode_to_bytes(key);
    if (!bytes)
      fail_file(key, "{}: token \"{}\" (id {}) has a character outside GPT-2's byte alphabet", encoder_path, key, id);
    if (bytes_of[id])
      fail_file(key, "{}: id {} is given to two tokens, \"{}\" and \"{}\"", encoder_path, id, spelled(*bytes_of[id]),
                key);
    if (!id_of.emplace(*bytes, id).second)
      fail_file(key, "{}: token \"{}\" appears twice (id {} and id {})", encoder_path, key, id_of[*bytes], id);
    bytes_of[id] = std::move(bytes);
  }
  std::array<unsigned char, 256> byte_of_id{};
  for (int b = 0; b < 256; ++b) {
    auto it = id_of.find(std::string(1, static_cast<char>(b)));
    if (it == id_of.end())
      fail_file(encoder_path, "{}: byte 0x{:02x} (\"{}\") has no token", encoder_path, b, gpt2_byte_to_unicode()[b]);
    if (it->second >= 256)
      fail_file(encoder_path, "{}: byte 0x{:02x} (\"{}\") has id {}; single bytes take ids 0..255", encoder_path, b,
                gpt2_byte_to_unicode()[b], it->second);
    byte_of_id[it->second] = static_cast<unsigned char>(b);
  }

  // vocab.bpe: "#version: 0.2", then "first second" per line.
  const std::string text = read_file(vocab_path);
  std::vector<Merge> merges;
  std::unordered_map<std::string, size_t> made_at;  // merge result bytes -> line (bytes: line 0)
  for (int b = 0; b < 256; ++b) made_at.emplace(std::string(1, static_cast<char>(b)), 0);
  std::unordered_map<std::string_view, size_t> pair_line;  // merge line text -> line number
  size_t line_no = 0, pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_no == 1) {
      if (!line.starts_with("#version:"))
        fail_file(vocab_path, "{}: line 1: expected the header '#version: 0.2', got '{}'", vocab_path,
                  line.substr(0, 80));
      continue;
    }
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos)
      fail_file(vocab_path, "{}: line {}: malformed merge '{}' (expected two tokens separated by one space)",
                vocab_path, line_no, line.substr(0, 80));
    const std::string_view first_text = line.substr(0, space), second_text = line.substr(space + 1);
    const auto first = gpt2_unicode_to_bytes(first_text), second = gpt2_unicode_to_bytes(second_text);
    if (!first || !second)
      fail_file(vocab_path, "{}: line {}: '{}' has a character outside GPT-2's byte alphabet", vocab_path, line_no,
                !first ? first_text : second_text);
    for (const auto* part : {&*first, &*second})
      if (!made_at.contains(*part))
        fail_file(vocab_path, "{}: line {}: merge part '{}' is neither a byte nor the result of an earlier merge",
                  vocab_path, line_no, spelled(*part));
    if (auto [it, inserted] = pair_line.emplace(line, line_no); !inserted)
      fail_file(vocab_path, "{}: line {}: duplicate merge '{}' (first on line {})", vocab_path, line_no, line,
                it->second);
    const std::string result = *first + *second;
    if (auto it = made_at.find(result); it != made_at.end())
      fail_file(vocab_path, "{}: line {}: merge '{}' makes '{}', which {} already made", vocab_path, line_no, line,
                spelled(result), it->second == 0 ? std::string("is a byte and") : fmt::format("line {}", it->second));
    made_at.emplace(result, line_no);
    const TokenId expected = static_cast<TokenId>(256 + merges.size());
    auto it = id_of.find(result);
    if (it == id_of.end())
      fail_file(vocab_path, "{}: line {}: merge result '{}' is not a token in {}", vocab_path, line_no, spelled(result),
                encoder_path);
    if (it->second != expected)
      fail_file(vocab_path, "{}: line {}: merge result '{}' has id {} in {}; expected {} (256 + the merge's rank)",
                vocab_path, line_no, spelled(result), it->second, encoder_path, expected);
    merges.emplace_back(id_of.at(*first), id_of.at(*second));
  }
  if (line_no == 0) fail_file(vocab_path, "{}: empty file (expected the header '#version: 0.2')", vocab_path);

  // Every other token must be a special token "<|...|>" after the merges, with no gaps in ids.
  const TokenId n_ordinary = static_cast<TokenId>(256 + merges.size());
  std::map<std::string, TokenId> specials;
  for (size_t id = static_cast<size_t>(n_ordinary); id < bytes_of.size(); ++id) {
    const std::string& bytes = *bytes_of[id];  // every id is present: ids are distinct and < size
    if (!(bytes.size() > 4 && bytes.starts_with("<|") && bytes.ends_with("|>")))
      fail_file(spelled(bytes),
                "{}: token \"{}\" (id {}) is neither a byte, a merge result from {}, nor a special token <|...|>",
                encoder_path, spelled(bytes), id, vocab_path);
    specials.emplace(bytes, static_cast<TokenId>(id));
  }
  try {
    return ByteBpeTokenizer(byte_of_id, std::move(merges), std::move(specials));
  } catch (const Error& e) {
    fail_file(e.field(), "{} + {}: {}", encoder_path, vocab_path, e.what());
  }
}

ByteBpeTokenizer ByteBpeTokenizer::load_gpt2_dir(const std::string& dir) {
  const std::filesystem::path d(dir);
  return load_gpt2((d / "encoder.json").string(), (d / "vocab.bpe").string());
}

void ByteBpeTokenizer::save_gpt2(const std::string& encoder_path, const std::string& vocab_path) const {
  nlohmann::ordered_json encoder = nlohmann::ordered_json::object();
  for (size_t id = 0; id < tokens_.size(); ++id) {
    const bool special = id >= 256 + merges_.size();
    encoder[special ? tokens_[id] : gpt2_bytes_to_unicode(tokens_[id])] = id;
  }
  std::string vocab = "#version: 0.2\n";
  for (const auto& [left, right] : merges_)
    vocab += gpt2_bytes_to_unicode(tokens_[left]) + " " + gpt2_bytes_to_unicode(tokens_[right]) + "\n";
  write_file_atomic(encoder_path, encoder.dump());
  write_file_atomic(vocab_path, vocab);
}

nlohmann::json ByteBpeTokenizer::to_json() const {
  nlohmann::json j;
  j["kind"] = "byte-bpe";
  j["version"] = 1;
  j["pattern"] = "gpt2";
  j["bytes"] = byte_of_id_;
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& [left, right] : merges_) merges.push_back({left, right});
  j["merges"] = std::move(merges);
  j["special_tokens"] = specials_;
  return j;
}

ByteBpeTokenizer ByteBpeTokenizer::from_json(const nlohmann::json& j) {
  if (!j.is_object() || j.value("kind", "") != "byte-bpe")
    fail_file("kind", "byte-bpe JSON: \"kind\" is not \"byte-bpe\"");
  if (!j.contains("version") || j["version"] != 1)
    fail_unsupported("version", "byte-bpe JSON: unsupported \"version\" (expected 1)");
  if (j.value("pattern", "") != "gpt2")
    fail_unsupported("pattern", "byte-bpe JSON: unsupported \"pattern\" (expected \"gpt2\")");
  if (!j.contains("bytes") || !j["bytes"].is_array() || j["bytes"].size() != 256)
    fail_file("bytes", "byte-bpe JSON: \"bytes\" must be an array of 256 byte values");
  std::array<unsigned char, 256> byte_of_id{};
  for (size_t i = 0; i < 256; ++i) {
    const auto& v = j["bytes"][i];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 255)
      fail_file("bytes", "byte-bpe JSON: \"bytes\"[{}] = {} is not a byte value", i, v.dump());
    byte_of_id[i] = static_cast<unsigned char>(v.get<int>());
  }
  if (!j.contains("merges") || !j["merges"].is_array()) fail_file("merges", "byte-bpe JSON: missing array \"merges\"");
  std::vector<Merge> merges;
  merges.reserve(j["merges"].size());
  for (size_t i = 0; i < j["merges"].size(); ++i) {
    const auto& m = j["merges"][i];
    if (!m.is_array() || m.size() != 2 || !m[0].is_number_integer() || !m[1].is_number_integer())
      fail_file("merges", "byte-bpe JSON: \"merges\"[{}] = {} is not a pair of ids", i, m.dump());
    const int64_t a = m[0].get<int64_t>(), b = m[1].get<int64_t>();
    if (a < 0 || b < 0 || a >= static_cast<int64_t>(256 + i) || b >= static_cast<int64_t>(256 + i))
      fail_file("merges", "byte-bpe JSON: \"merges\"[{}] = {} uses an id that is not yet a token (ids below {})", i,
                m.dump(), 256 + i);
    merges.emplace_back(static_cast<TokenId>(a), static_cast<TokenId>(b));
  }
  std::map<std::string, TokenId> specials;
  if (j.contains("special_tokens")) {
    if (!j["special_tokens"].is_object())
      fail_file("special_tokens", "byte-bpe JSON: \"special_tokens\" must be an object");
    for (const auto& [text, id] : j["special_tokens"].items()) {
      if (!id.is_number_integer())
        fail_file(text, "byte-bpe JSON: special token '{}' has id {}, not an integer", text, id.dump());
      specials.emplace(text, id.get<TokenId>());
    }
  }
  try {
    return ByteBpeTokenizer(byte_of_id, std::move(merges), std::move(specials));
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::BadInput) throw;
    throw Error(ErrorKind::BadFile, e.field(), e.what());  // the JSON's contents are bad, not a caller's data
  }
}

}  // namespace tformer
