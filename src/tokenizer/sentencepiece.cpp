#include "tokenizer/sentencepiece.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <queue>

#include "core/error.h"
#include "core/file_io.h"
#include "core/utf8.h"

namespace tformer {

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's whitespace symbol

// ---- the protobuf wire format, just what ModelProto needs ----------------------------------------

class ProtoReader {
 public:
  ProtoReader(std::string_view data, std::string where) : data_(data), where_(std::move(where)) {}
  bool done() const { return pos_ >= data_.size(); }
  // The next field's number and wire type.
  std::pair<uint32_t, uint32_t> tag() {
    const uint64_t t = varint("a field tag");
    if (t >> 35) bad("a field tag out of range");
    return {static_cast<uint32_t>(t >> 3), static_cast<uint32_t>(t & 7)};
  }
  uint64_t varint(const char* what) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (pos_ >= data_.size()) bad(fmt::format("{} cut short", what));
      const auto b = static_cast<unsigned char>(data_[pos_++]);
      if (shift == 63 && b > 1) bad(fmt::format("{}: a varint longer than 64 bits", what));
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    bad(fmt::format("{}: a varint longer than 10 bytes", what));
  }
  std::string_view bytes(const char* what) {
    const uint64_t n = varint(what);
    if (n > data_.size() - pos_)
      bad(fmt::format("{}: a length of {} bytes with {} left", what, n, data_.size() - pos_));
    const std::string_view s = data_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  float fixed32_float(const char* what) {
    if (data_.size() - pos_ < 4) bad(fmt::format("{} cut short", what));
    float f = 0;
    std::memcpy(&f, data_.data() + pos_, 4);
    pos_ += 4;
    return f;
  }
  void skip(uint32_t wire) {
    switch (wire) {
      case 0:
        varint("a skipped field");
        return;
      case 1:
        if (data_.size() - pos_ < 8) bad("a skipped 64-bit field cut short");
        pos_ += 8;
        return;
      case 2:
        bytes("a skipped field");
        return;
      case 5:
        if (data_.size() - pos_ < 4) bad("a skipped 32-bit field cut short");
        pos_ += 4;
        return;
      default:
        bad(fmt::format("wire type {} (groups are not used by ModelProto)", wire));
    }
  }
  void expect(uint32_t wire, uint32_t want, const char* field) {
    if (wire != want) bad(fmt::format("{} has wire type {}, expected {}", field, wire, want));
  }
  [[noreturn]] void bad(const std::string& what) const {
    fail_file(where_, "{}: not a SentencePiece model: {} (at byte {})", where_, what, pos_);
  }

 private:
  std::string_view data_;
  std::string where_;
  size_t pos_ = 0;
};

// "<0xXX>" (two hexadecimal digits, either case) -> the byte; -1 when the text is not one.
int byte_piece_value(std::string_view t) {
  if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>') return -1;
  auto hex = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                  : -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

bool valid_utf8_char(std::string_view s, size_t& len) {
  const auto c = static_cast<unsigned char>(s[0]);
  len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (len == 0 || len > s.size()) return false;
  return is_valid_utf8(s.substr(0, len));
}

}  // namespace

// The precompiled charsmap's double-array trie (darts-clone's layout): 32-bit units; a unit's
// label is bits 0-7 (and bit 31, set on leaves so that no byte matches them), bit 8 says the node
// has a leaf child holding a value, and its offset is bits 10-31 shifted left by 8 when bit 9 is set.
struct SentencePieceTokenizer::Trie {
  std::vector<uint32_t> units;
  std::string_view replacements;  // NUL-terminated strings; values are offsets into them
  std::string storage;

  static uint32_t offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }
  static uint32_t label(uint32_t u) { return u & ((1u << 31) | 0xffu); }
  static bool has_leaf(uint32_t u) { return ((u >> 8) & 1u) == 1u; }
  static uint32_t value(uint32_t u) { return u & ((1u << 31) - 1u); }

  // The longest key that is a prefix of s: its length and value; {0, 0} when none. Every index is
  // checked: a broken trie stops the search rather than reading outside it.
  std::pair<size_t, uint32_t> longest_prefix(std::string_view s) const {
    std::pair<size_t, uint32_t> best{0, 0};
    if (units.empty()) return best;
    size_t node = offset(units[0]);
    for (size_t i = 0; i < s.size(); ++i) {
      const auto c = static_cast<unsigned char>(s[i]);
      node ^= c;
      if (node >= units.size()) return best;
      const uint32_t u = units[node];
      if (label(u) != c) return best;
      node ^= offset(u);
      if (node >= units.size()) return best;
      if (has_leaf(u)) best = {i + 1, value(units[node])};
    }
    return best;
  }
};

SentencePieceTokenizer::~SentencePieceTokenizer() = default;
SentencePieceTokenizer::SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept = default;
SentencePieceTokenizer& SentencePieceTokenizer::operator=(SentencePieceTokenizer&&) noexcept = default;

SentencePieceTokenizer::SentencePieceTokenizer(std::vector<Piece> pieces, Normalizer normalizer, bool byte_fallback,
                                               std::string unk_surface)
    : pieces_(std::move(pieces)),
      normalizer_(std::move(normalizer)),
      byte_fallback_(byte_fallback),
      unk_surface_(std::move(unk_surface)) {
  build();
}

void SentencePieceTokenizer::build() {
  if (pieces_.size() > static_cast<size_t>(INT32_MAX))
    fail_input("pieces", "SentencePiece: {} pieces exceed the token id range", pieces_.size());
  byte_id_.assign(256, -1);
  for (size_t i = 0; i < pieces_.size(); ++i) {
    const Piece& p = pieces_[i];
    const auto id = static_cast<TokenId>(i);
    if (p.text.empty()) fail_input(fmt::format("piece {}", i), "SentencePiece: piece {} is empty", i);
    // A NaN or infinite score orders no merge, and the JSON form (a model file's tokenizer) could
    // not hold it.
    if (!std::isfinite(p.score))
      fail_input(fmt::format("piece {}", i), "SentencePiece: piece {} '{}' has score {}, not a finite number", i,
                 p.text, p.score);
    const bool mergeable =
        p.type == PieceType::Normal || p.type == PieceType::UserDefined || p.type == PieceType::Unused;
    auto& map = mergeable ? mergeable_ : reserved_;
    if (!map.emplace(p.text, id).second)
      fail_input(fmt::format("piece {}", i), "SentencePiece: piece {} '{}' is defined twice", i, p.text);
    if (p.type == PieceType::UserDefined) user_defined_.push_back(p.text);
    if (p.type == PieceType::Unknown) {
      if (unk_id_ >= 0)
        fail_input(fmt::format("piece {}", i), "SentencePiece: two unknown pieces ({} and {})", unk_id_, i);
      unk_id_ = id;
    }
    if (p.type == PieceType::Byte) {
      const int b = byte_piece_value(p.text);
      if (b < 0) fail_input(fmt::format("piece {}", i), "SentencePiece: byte piece {} '{}' is not <0xXX>", i, p.text);
      byte_id_[static_cast<size_t>(b)] = id;
    }
  }
  if (unk_id_ < 0) fail_input("pieces", "SentencePiece: the model has no unknown piece");
  if (byte_fallback_)
    for (int b = 0; b < 256; ++b)
      if (byte_id_[static_cast<size_t>(b)] < 0)
        fail_input("pieces", "SentencePiece: byte_fallback is on but byte <0x{:02X}> has no piece", b);
  specials_by_length_.clear();
  for (size_t i = 0; i < pieces_.size(); ++i)
    if (pieces_[i].type == PieceType::UserDefined || pieces_[i].type == PieceType::Control)
      specials_by_length_.emplace_back(pieces_[i].text, static_cast<TokenId>(i));
  std::sort(user_defined_.begin(), user_defined_.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  trie_.reset();
  if (!normalizer_.charsmap.empty()) {
    const std::string& blob = normalizer_.charsmap;
    uint32_t trie_bytes = 0;
    if (blob.size() <= 4) fail_input("precompiled_charsmap", "SentencePiece: the precompiled charsmap is cut short");
    std::memcpy(&trie_bytes, blob.data(), 4);
    if (trie_bytes >= blob.size() - 4 + 1 || trie_bytes % 4 != 0)
      fail_input("precompiled_charsmap", "SentencePiece: the charsmap's trie of {} bytes does not fit its {} bytes",
                 trie_bytes, blob.size());
    auto t = std::make_unique<Trie>();
    t->units.resize(trie_bytes / 4);
    if (trie_bytes > 0) std::memcpy(t->units.data(), blob.data() + 4, trie_bytes);  // an empty trie: no data()
    t->storage = blob.substr(4 + trie_bytes);
    if (t->storage.empty() || t->storage.back() != '\0') t->storage.push_back('\0');
    t->replacements = t->storage;
    trie_ = std::move(t);
  }
}

size_t SentencePieceTokenizer::user_defined_prefix(std::string_view s) const {
  for (const auto& u : user_defined_)
    if (s.starts_with(u)) return u.size();
  return 0;
}

std::pair<size_t, std::string_view> SentencePieceTokenizer::charsmap_prefix(std::string_view s) const {
  if (!trie_) return {0, {}};
  const auto [len, value] = trie_->longest_prefix(s);
  if (len == 0 || value >= trie_->replacements.size()) return {0, {}};
  const std::string_view rest = trie_->replacements.substr(value);
  return {len, rest.substr(0, rest.find('\0'))};
}

std::string SentencePieceTokenizer::normalize(std::string_view input) const {
  std::string out;
  // One normalized unit at the start of `s`: its replacement and how many input bytes it takes.
  auto unit = [&](std::string_view s) -> std::pair<std::string_view, size_t> {
    if (const size_t u = user_defined_prefix(s)) return {s.substr(0, u), u};
    if (const auto [len, rep] = charsmap_prefix(s); len > 0) return {rep, len};
    size_t len = 0;
    if (!valid_utf8_char(s, len)) return {"\xEF\xBF\xBD", 1};
    return {s.substr(0, len), len};
  };
  const Normalizer& n = normalizer_;
  if (n.remove_extra_whitespaces)
    while (!input.empty()) {
      const auto [rep, len] = unit(input);
      if (rep != " ") break;
      input.remove_prefix(len);
    }
  if (input.empty()) return out;
  const std::string_view space = n.escape_whitespaces ? kSpace : std::string_view(" ");
  if (!whitespace_suffix_ && n.add_dummy_prefix) out += space;
  bool prev_space = n.remove_extra_whitespaces;
  while (!input.empty()) {
    auto [rep, len] = unit(input);
    while (prev_space && rep.starts_with(' ')) rep.remove_prefix(1);
    if (!rep.empty()) {
      for (char c : rep) {
        if (c == ' ' && n.escape_whitespaces)
          out += kSpace;
        else
          out += c;
      }
      prev_space = rep.back() == ' ';
    }
    input.remove_prefix(len);
    if (!n.remove_extra_whitespaces) prev_space = false;
  }
  if (n.remove_extra_whitespaces)
    while (out.ends_with(space)) out.resize(out.size() - space.size());
  if (whitespace_suffix_ && n.add_dummy_prefix) out += space;
  return out;
}

std::vector<TokenId> SentencePieceTokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<TokenId> ids;
  if (!llama_cpp_) {
    encode_normalized(normalize(text), ids);
    return ids;
  }
  // llama.cpp: the text is cut at user-defined pieces (and, with allow_special, control pieces),
  // each one's id is emitted, and every stretch between them is encoded on its own, with a space
  // in front when it comes first or after such a piece (add_space_prefix).
  bool after_special = true;
  size_t start = 0, at = 0;
  auto flush = [&](size_t end) {
    if (end == start) return;
    std::string stretch = after_special && normalizer_.add_dummy_prefix ? " " : "";
    stretch.append(text.substr(start, end - start));
    std::string escaped;
    for (char c : stretch) {
      if (c == ' ')
        escaped += kSpace;
      else
        escaped += c;
    }
    encode_normalized(escaped, ids);
    after_special = false;
  };
  while (at < text.size()) {
    size_t best = 0;
    TokenId best_id = -1;
    for (const auto& [piece, id] : specials_by_length_) {
      if (!allow_special && pieces_[static_cast<size_t>(id)].type == PieceType::Control) continue;
      if (piece.size() > best && text.substr(at).starts_with(piece)) {
        best = piece.size();
        best_id = id;
      }
    }
    if (best == 0) {
      ++at;
      continue;
    }
    flush(at);
    ids.push_back(best_id);
    after_special = true;
    at += best;
    start = at;
  }
  flush(text.size());
  return ids;
}

void SentencePieceTokenizer::encode_normalized(std::string_view normalized, std::vector<TokenId>& ids) const {
  if (normalized.empty()) return;
  // Symbols over `normalized`: [begin, begin + len), linked; frozen ones never merge.
  struct Symbol {
    size_t begin, len;
    int prev, next;
    bool frozen;
  };
  std::vector<Symbol> sym;
  for (size_t at = 0; at < normalized.size();) {
    const std::string_view rest(normalized.data() + at, normalized.size() - at);
    size_t len = llama_cpp_ ? 0 : user_defined_prefix(rest);
    const bool frozen = len > 0;
    if (!frozen && !valid_utf8_char(rest, len)) len = 1;  // cannot happen after normalize
    const int i = static_cast<int>(sym.size());
    sym.push_back({at, len, i - 1, -1, frozen});
    if (i > 0) sym[static_cast<size_t>(i) - 1].next = i;
    at += len;
  }
  struct Pair {
    float score;
    int left, right;
    size_t len;
  };
  auto worse = [](const Pair& a, const Pair& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Pair, std::vector<Pair>, decltype(worse)> agenda(worse);
  // Unused pieces merged here are split back afterwards: what each was made of.
  std::unordered_map<std::string, std::pair<std::string, std::string>> made_of;
  auto piece_of = [&](const Symbol& s) { return std::string_view(normalized.data() + s.begin, s.len); };
  auto consider = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const Symbol &a = sym[static_cast<size_t>(l)], &b = sym[static_cast<size_t>(r)];
    if (a.frozen || b.frozen) return;
    const std::string joined(normalized.data() + a.begin, a.len + b.len);
    const auto it = mergeable_.find(joined);
    if (it == mergeable_.end()) return;
    const Piece& p = pieces_[static_cast<size_t>(it->second)];
    agenda.push({p.score, l, r, joined.size()});
    if (p.type == PieceType::Unused) made_of[joined] = {std::string(piece_of(a)), std::string(piece_of(b))};
  };
  for (size_t i = 1; i < sym.size(); ++i) consider(static_cast<int>(i) - 1, static_cast<int>(i));
  while (!agenda.empty()) {
    const Pair top = agenda.top();
    agenda.pop();
    Symbol &a = sym[static_cast<size_t>(top.left)], &b = sym[static_cast<size_t>(top.right)];
    if (a.len == 0 || b.len == 0 || a.len + b.len != top.len || a.next != top.right) continue;
    a.len += b.len;
    a.next = b.next;
    if (b.next >= 0) sym[static_cast<size_t>(b.next)].prev = top.left;
    b.len = 0;
    consider(a.prev, top.left);
    consider(top.left, a.next);
  }
  bool prev_unk = false;
  auto emit = [&](std::string_view w, auto&& self) -> void {
    // sentencepiece's PieceToId looks at control, unknown and byte pieces first.
    if (const auto r = reserved_.find(std::string(w)); r != reserved_.end() && r->second != unk_id_) {
      ids.push_back(r->second);
      prev_unk = false;
      return;
    }
    const auto it = mergeable_.find(std::string(w));
    if (it != mergeable_.end()) {
      if (pieces_[static_cast<size_t>(it->second)].type == PieceType::Unused) {
        const auto parts = made_of.find(std::string(w));
        if (parts != made_of.end()) {
          self(parts->second.first, self);
          self(parts->second.second, self);
          return;
        }
      }
      ids.push_back(it->second);
      prev_unk = false;
      return;
    }
    if (byte_fallback_) {
      for (char c : w) ids.push_back(byte_id_[static_cast<unsigned char>(c)]);
      prev_unk = false;
      return;
    }
    if (!prev_unk) ids.push_back(unk_id_);  // a run of unknown symbols is one unknown id
    prev_unk = true;
  };
  for (int i = 0; i >= 0 && static_cast<size_t>(i) < sym.size(); i = sym[static_cast<size_t>(i)].next)
    emit(piece_of(sym[static_cast<size_t>(i)]), emit);
}

void SentencePieceTokenizer::append_token_bytes(TokenId id, std::string& out) const {
  if (id < 0 || static_cast<size_t>(id) >= pieces_.size())
    fail_input(fmt::format("token {}", id), "SentencePiece: token id {} is outside [0, {})", id, pieces_.size());
  const Piece& p = pieces_[static_cast<size_t>(id)];
  switch (p.type) {
    case PieceType::Control:
      return;
    case PieceType::Unknown:
      out += unk_surface_;
      return;
    case PieceType::Byte:
      out += static_cast<char>(byte_piece_value(p.text));
      return;
    default:
      break;
  }
  const std::string_view t = p.text;
  for (size_t i = 0; i < t.size();) {
    if (t.substr(i).starts_with(kSpace)) {
      out += ' ';
      i += kSpace.size();
    } else {
      out += t[i++];
    }
  }
}

void SentencePieceTokenizer::append_token_bytes_after(TokenId previous, TokenId id, std::string& out) const {
  const size_t start = out.size();
  append_token_bytes(id, out);
  // The first token of a text loses the space the dummy prefix put in front of it.
  if (previous < 0 && normalizer_.add_dummy_prefix && !whitespace_suffix_ && out.size() > start && out[start] == ' ')
    out.erase(start, 1);
}

std::map<std::string, TokenId> SentencePieceTokenizer::special_tokens() const {
  std::map<std::string, TokenId> m;
  for (size_t i = 0; i < pieces_.size(); ++i)
    if (pieces_[i].type == PieceType::Control) m.emplace(pieces_[i].text, static_cast<TokenId>(i));
  return m;
}

// ---- the .model file and the JSON form -----------------------------------------------------------

SentencePieceTokenizer SentencePieceTokenizer::from_model_proto(std::string_view bytes, const std::string& source) {
  std::vector<Piece> pieces;
  Normalizer norm;
  bool byte_fallback = false, suffix = false, have_trainer = false;
  int64_t model_type = 1;  // proto default: UNIGRAM
  std::string unk_surface = " \xE2\x81\x87 ";
  ProtoReader top(bytes, source);
  while (!top.done()) {
    const auto [field, wire] = top.tag();
    if (field == 1) {
      top.expect(wire, 2, "pieces");
      ProtoReader pr(top.bytes("a piece"), fmt::format("{}: piece {}", source, pieces.size()));
      Piece p;
      while (!pr.done()) {
        const auto [f, w] = pr.tag();
        if (f == 1) {
          pr.expect(w, 2, "piece");
          p.text = std::string(pr.bytes("piece"));
        } else if (f == 2) {
          pr.expect(w, 5, "score");
          p.score = pr.fixed32_float("score");
        } else if (f == 3) {
          pr.expect(w, 0, "type");
          const uint64_t t = pr.varint("type");
          if (t < 1 || t > 6) pr.bad(fmt::format("piece type {}", t));
          p.type = static_cast<PieceType>(t);
        } else {
          pr.skip(w);
        }
      }
      pieces.push_back(std::move(p));
    } else if (field == 2) {
      top.expect(wire, 2, "trainer_spec");
      have_trainer = true;
      ProtoReader tr(top.bytes("trainer_spec"), source + ": trainer_spec");
      while (!tr.done()) {
        const auto [f, w] = tr.tag();
        if (f == 3 && w == 0) {
          model_type = static_cast<int64_t>(tr.varint("model_type"));
        } else if (f == 24 && w == 0) {
          suffix = tr.varint("treat_whitespace_as_suffix") != 0;
        } else if (f == 35 && w == 0) {
          byte_fallback = tr.varint("byte_fallback") != 0;
        } else if (f == 44 && w == 2) {
          unk_surface = std::string(tr.bytes("unk_surface"));
        } else {
          tr.skip(w);
        }
      }
    } else if (field == 3) {
      top.expect(wire, 2, "normalizer_spec");
      ProtoReader nr(top.bytes("normalizer_spec"), source + ": normalizer_spec");
      while (!nr.done()) {
        const auto [f, w] = nr.tag();
        if (f == 1 && w == 2) {
          norm.name = std::string(nr.bytes("name"));
        } else if (f == 2 && w == 2) {
          norm.charsmap = std::string(nr.bytes("precompiled_charsmap"));
        } else if (f == 3 && w == 0) {
          norm.add_dummy_prefix = nr.varint("add_dummy_prefix") != 0;
        } else if (f == 4 && w == 0) {
          norm.remove_extra_whitespaces = nr.varint("remove_extra_whitespaces") != 0;
        } else if (f == 5 && w == 0) {
          norm.escape_whitespaces = nr.varint("escape_whitespaces") != 0;
        } else {
          nr.skip(w);
        }
      }
    } else {
      top.skip(wire);
    }
  }
  if (pieces.empty()) fail_file(source, "{}: not a SentencePiece model: no pieces", source);
  if (!have_trainer || model_type != 2)
    fail_unsupported("model_type",
                     "{}: trainer_spec.model_type {} ({}): tformer reads SentencePiece BPE models (model_type 2)",
                     source, model_type,
                     model_type == 1   ? "unigram"
                     : model_type == 3 ? "word"
                     : model_type == 4 ? "char"
                                       : "unknown");
  try {
    SentencePieceTokenizer t(std::move(pieces), std::move(norm), byte_fallback, std::move(unk_surface));
    t.whitespace_suffix_ = suffix;
    return t;
  } catch (const Error& e) {
    fail_file(e.field(), "{}: {}", source, e.what());
  }
}

SentencePieceTokenizer SentencePieceTokenizer::load(const std::string& path) {
  return from_model_proto(read_file(path), path);
}

nlohmann::json SentencePieceTokenizer::to_json() const {
  nlohmann::json pieces = nlohmann::json::array();
  for (const auto& p : pieces_) pieces.push_back({p.text, p.score, static_cast<int>(p.type)});
  nlohmann::json j = {{"kind", "sentencepiece"},
                      {"version", 1},
                      {"pieces", std::move(pieces)},
                      {"normalizer",
                       {{"name", normalizer_.name},
                        {"precompiled_charsmap", base64_encode(normalizer_.charsmap)},
                        {"add_dummy_prefix", normalizer_.add_dummy_prefix},
                        {"remove_extra_whitespaces", normalizer_.remove_extra_whitespaces},
                        {"escape_whitespaces", normalizer_.escape_whitespaces}}},
                      {"byte_fallback", byte_fallback_},
                      {"treat_whitespace_as_suffix", whitespace_suffix_},
                      {"llama_cpp", llama_cpp_},
                      {"unk_surface", unk_surface_}};
  if (bos_) j["bos"] = *bos_;
  if (eos_) j["eos"] = *eos_;
  return j;
}

void SentencePieceTokenizer::set_bos(std::optional<TokenId> id) {
  if (id && (*id < 0 || *id >= vocab_size()))
    fail_input("bos", "BOS id {} is outside the vocabulary of {} pieces", *id, vocab_size());
  bos_ = id;
}

void SentencePieceTokenizer::set_eos(std::optional<TokenId> id) {
  if (id && (*id < 0 || *id >= vocab_size()))
    fail_input("eos", "EOS id {} is outside the vocabulary of {} pieces", *id, vocab_size());
  eos_ = id;
}

SentencePieceTokenizer SentencePieceTokenizer::from_json(const nlohmann::json& j) {
  try {
    if (j.at("kind") != "sentencepiece" || j.at("version") != 1)
      fail_file("kind", "sentencepiece JSON: expected kind \"sentencepiece\", version 1");
    std::vector<Piece> pieces;
    for (const auto& p : j.at("pieces")) {
      const int type = p.at(2).get<int>();
      if (type < 1 || type > 6) fail_file("pieces", "sentencepiece JSON: piece type {}", type);
      pieces.push_back({p.at(0).get<std::string>(), p.at(1).get<float>(), static_cast<PieceType>(type)});
    }
    const auto& n = j.at("normalizer");
    Normalizer norm{n.at("name").get<std::string>(),
                    base64_decode(n.at("precompiled_charsmap").get<std::string>(), "precompiled_charsmap"),
                    n.at("add_dummy_prefix").get<bool>(), n.at("remove_extra_whitespaces").get<bool>(),
                    n.at("escape_whitespaces").get<bool>()};
    SentencePieceTokenizer t(std::move(pieces), std::move(norm), j.at("byte_fallback").get<bool>(),
                             j.at("unk_surface").get<std::string>());
    t.whitespace_suffix_ = j.at("treat_whitespace_as_suffix").get<bool>();
    t.llama_cpp_ = j.value("llama_cpp", false);
    try {
      if (j.contains("bos")) t.set_bos(j["bos"].get<TokenId>());
      if (j.contains("eos")) t.set_eos(j["eos"].get<TokenId>());
    } catch (const Error& e) {
      fail_file(e.field(), "sentencepiece JSON: {}", e.what());
    }
    return t;
  } catch (const nlohmann::json::exception& e) {
    fail_file("sentencepiece", "sentencepiece JSON: {}", e.what());
  }
}

// ---- base64 --------------------------------------------------------------------------------------

std::string base64_encode(std::string_view bytes) {
  static const char* table = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    if (i + 2 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 2]);
    out += table[(v >> 18) & 63];
    out += table[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? table[(v >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? table[v & 63] : '=';
  }
  return out;
}

std::string base64_decode(std::string_view text, const std::string& what) {
  auto value = [&](char c) -> uint32_t {
    if (c >= 'A' && c <= 'Z') return static_cast<uint32_t>(c - 'A');
    if (c >= 'a' && c <= 'z') return static_cast<uint32_t>(c - 'a' + 26);
    if (c >= '0' && c <= '9') return static_cast<uint32_t>(c - '0' + 52);
    if (c == '+') return 62;
    if (c == '/') return 63;
    fail_file(what, "{}: '{}' is not a base64 character", what, c);
  };
  if (text.size() % 4 != 0)
    fail_file(what, "{}: base64 text of {} characters (not a multiple of 4)", what, text.size());
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool pad2 = text[i + 2] == '=', pad3 = text[i + 3] == '=';
    if ((pad2 && !pad3) || ((pad2 || pad3) && i + 4 != text.size()))
      fail_file(what, "{}: misplaced base64 padding at character {}", what, i);
    const uint32_t v = value(text[i]) << 18 | value(text[i + 1]) << 12 | (pad2 ? 0 : value(text[i + 2]) << 6) |
                       (pad3 ? 0 : value(text[i + 3]));
    out += static_cast<char>(v >> 16);
    if (!pad2) out += static_cast<char>((v >> 8) & 0xff);
    if (!pad3) out += static_cast<char>(v & 0xff);
  }
  return out;
}

}  // namespace tformer
