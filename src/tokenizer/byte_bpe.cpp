// The byte-level BPE vocabulary: 256 byte tokens, one token per merge, the special tokens, and the
// merge tables built from them (byte_bpe_tables.h). The byte alphabet: byte_bpe_alphabet.cpp;
// encoding: byte_bpe_encode.cpp; the files: byte_bpe_files.cpp.
#include <algorithm>
#include <climits>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/byte_bpe.h"
#include "tokenizer/byte_bpe_tables.h"

namespace tformer {
namespace {

std::string spelled(std::string_view bytes) { return gpt2_bytes_to_unicode(bytes); }

}  // namespace

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
  // Special tokens after the merges' ids, one id each; there may be gaps between them (tiktoken's
  // cl100k_base has 100257-100260 and 100276): a gap is an id that is no token.
  TokenId last = static_cast<TokenId>(n_ordinary) - 1;
  for (const auto& [text, id] : specials_) last = std::max(last, id);
  const auto limit = static_cast<TokenId>(n_ordinary + specials_.size() + (1 << 20));
  if (last >= limit)
    fail_input("special_tokens", "byte-bpe: special token id {} leaves too large a gap after the merges (ids from {})",
               last, n_ordinary);
  tokens_.resize(static_cast<size_t>(last) + 1);
  for (const auto& [text, id] : specials_) {
    if (text.empty()) fail_input("special_tokens", "byte-bpe: a special token has empty text");
    // The JSON form (a model file's tokenizer, encoder.json) holds each special token as a string.
    if (!is_valid_utf8(text))
      fail_input("special_tokens", "byte-bpe: special token '{}' (id {}) is not valid UTF-8", spelled(text), id);
    if (id < static_cast<TokenId>(n_ordinary) || !tokens_[id].empty())
      fail_input(text, "byte-bpe: special token '{}' has id {}; special tokens take ids from {}, one each", text, id,
                 n_ordinary);
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
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size() || tokens_[static_cast<size_t>(id)].empty()) [[unlikely]]
    fail_input(fmt::format("token id {}", id), "byte-bpe: token id {} is {} (ids 0..{})", id,
               id < 0 || static_cast<size_t>(id) >= tokens_.size() ? "outside the vocabulary"
                                                                   : "not a token (a gap among the special tokens)",
               static_cast<int64_t>(tokens_.size()) - 1);
  return tokens_[static_cast<size_t>(id)];
}

void ByteBpeTokenizer::append_token_bytes(TokenId id, std::string& out) const { out += token_bytes(id); }

}  // namespace tformer
