// Char-level tokenizer over BYTES, not Unicode characters: a "character" here is one byte of the
// UTF-8 text. Bytes make the round trip exact for every input (invalid UTF-8 included) with no
// unknown-character policy, and the streaming decoder (tokenizer.h) reassembles multi-byte
// characters for printing. On an ASCII corpus bytes and characters coincide.
//
// Two vocabularies:
//   CharTokenizer::bytes()              256 ids, id = byte value. Encodes anything.
//   CharTokenizer::from_corpus(text)    the sorted distinct bytes of a corpus get ids 0..n-1, as
//                                       nanoGPT's shakespeare_char does with its sorted character
//                                       set: Tiny Shakespeare gives 65 ids, '\n' = 0, ' ' = 1,
//                                       'A' = 13, 'a' = 39. Encoding a byte the corpus did not
//                                       contain throws Error naming its position and value.
//
//   auto tok = CharTokenizer::from_corpus("hello");   // alphabet "ehlo": e=0 h=1 l=2 o=3
//   tok.encode("hole") == {1, 3, 2, 0}
//
// JSON form: {"kind": "char", "version": 1, "bytes": [10, 32, ...]}, "bytes" listing the byte value
// of each id in id order; the full byte vocabulary stores all 256.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace tformer {

class CharTokenizer : public Tokenizer {
 public:
  // The 256-id byte vocabulary.
  static CharTokenizer bytes();
  // The sorted distinct bytes of corpus (an empty corpus gives an empty vocabulary).
  static CharTokenizer from_corpus(std::string_view corpus);
  // alphabet: the byte of each id, in id order; strictly increasing is not required, distinct is.
  explicit CharTokenizer(std::vector<unsigned char> alphabet);
  static CharTokenizer from_json(const nlohmann::json& j);

  std::string kind() const override { return "char"; }
  bool cuts_at_lines() const override { return true; }
  int64_t vocab_size() const override { return static_cast<int64_t>(alphabet_.size()); }
  std::vector<TokenId> encode(std::string_view text, bool allow_special = false) const override;
  void append_token_bytes(TokenId id, std::string& out) const override;
  nlohmann::json to_json() const override;

  const std::vector<unsigned char>& alphabet() const { return alphabet_; }

 private:
  std::vector<unsigned char> alphabet_;  // id -> byte
  std::array<TokenId, 256> id_of_{};     // byte -> id, -1 when not in the alphabet
};

}  // namespace tformer
