// Sennrich BPE as a Tokenizer (kind "bpe"): token ids over the merged symbols of a codes file
// (sennrich_bpe.h), exact on every byte string: decode(encode(x)) == x, invalid UTF-8 included.
//
// Words and pieces. The text is cut into words as `tformer bpe learn` and `bpe apply --input FILE`
// cut it: separators are ' ', '\n' and '\r'; every other byte belongs to a word (tabs, no-break
// spaces...), and a word also ends just after a Python line break that subword-nmt keeps inside
// words (\v, \f, \x1c-\x1e, U+0085, U+2028, U+2029: text_lines.h). Each word is segmented exactly as
// `bpe apply` segments it, and its pieces become the ids of their symbols: on text whose characters
// all have ids, the symbol ids are apply's output pieces one for one (a word's last piece is the
// symbol with "</w>", e.g. "est</w>", a different id from "est" inside a word).
//
// Vocabulary, in this order (ids):
//   0..255     byte fallback: id b is the single byte b. A character without a symbol of its own
//              (seen neither in the codes nor in the alphabet given) is written as the bytes of its
//              UTF-8 form, and so is every byte that is not valid UTF-8 (a word is cut into valid
//              stretches at such bytes, and each stretch is segmented as a word of its own).
//   256..271   runs of 1..16 spaces;  272 "\n";  273 "\n\n";  274 "\r";  275 "\r\n"
//   276..      symbols: first the alphabet, sorted by code point, each character c as c and then
//              c</w> (version 0.1 codes: c alone, then the symbol "</w>" after the alphabet); then
//              the merge results in rank order, each string once (a result already in the
//              vocabulary, e.g. the same string made by two merges, keeps its first id).
//              The alphabet is every character a codes line mentions, plus any given when the
//              tokenizer is built (`tformer bpe learn --tokenizer-output` gives every character of
//              the corpus, so nothing seen in training falls back to bytes).
//
// Word boundaries. A symbol ending in "</w>" is word-final and decodes to its text without the
// marker. Between a word-final symbol (unless its text ends in one of the kept line breaks above)
// and a following symbol, decode inserts ONE space: that is how a word boundary is marked in ids,
// and the usual single space between two words costs no id. Every other separator is written with
// whitespace ids, taken greedily (runs of spaces in pieces of at most 16, "\r\n" and "\n\n" before
// "\r" and "\n"); a single space is written explicitly too when the implied one would not apply
// (after a byte-fallback id or a whitespace id, or before a word that starts with a byte-fallback
// id). decode therefore depends on the previous id (Tokenizer::append_token_bytes_after); a lone
// token's bytes (append_token_bytes) never include the implied space.
//
// Worked example (tests/test_tokenizer_sennrich.cpp), codes "#version: 0.2" + "l o", "lo w</w>",
// "e s", "es t</w>", "lo w": alphabet e l o s t w, so e=276 e</w>=277 l=278 l</w>=279 o=280
// o</w>=281 s=282 s</w>=283 t=284 t</w>=285 w=286 w</w>=287, then lo=288 low</w>=289 es=290
// est</w>=291 low=292; vocab_size 293.
//   "lowest low\n  slow xy\n" ->
//     lowest -> low est</w>           292 291
//     " "    implied (est</w> then a symbol)
//     low    -> low</w>               289
//     "\n  " -> "\n" "  "             272 257
//     slow   -> s low</w>             282 289
//     " "    explicit: "xy" starts with a byte id   256
//     xy     -> bytes 'x' 'y'         120 121
//     "\n"                            272
//   decode puts " " between 291 and 289 only.
//
// JSON form:
//   {"kind": "bpe", "version": 1, "codes_version": "0.2",
//    "merges": [["l", "o"], ["lo", "w</w>"], ...],   in rank order
//    "alphabet": ["e", "l", ...],                     characters given beyond the codes (may be empty)
//    "vocab_size": 293}                               checked on load
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/sennrich_bpe.h"
#include "tokenizer/tokenizer.h"

namespace tformer {

class SennrichTokenizer : public Tokenizer {
 public:
  static constexpr TokenId kFirstWhitespace = 256;
  static constexpr TokenId kFirstSymbol = 276;
  static constexpr int kMaxSpaceRun = 16;

  // From codes text (errors name `name` and the line, as SennrichBpe::from_codes). alphabet:
  // characters (each one UTF-8 code point) to give ids besides those the codes mention.
  static SennrichTokenizer from_codes(std::string_view codes, const std::string& name,
                                      const std::vector<std::string>& alphabet = {});
  static SennrichTokenizer load_codes(const std::string& path, const std::vector<std::string>& alphabet = {});
  // From learned merges (version 0.2) and the characters of the corpus they were learned on.
  static SennrichTokenizer from_merges(const std::vector<std::pair<std::string, std::string>>& merges,
                                       const std::vector<std::string>& alphabet);
  static SennrichTokenizer from_json(const nlohmann::json& j);

  SennrichTokenizer(SennrichTokenizer&&) noexcept;
  SennrichTokenizer& operator=(SennrichTokenizer&&) noexcept;
  ~SennrichTokenizer() override;

  std::string kind() const override { return "bpe"; }
  bool cuts_at_lines() const override { return true; }
  int64_t vocab_size() const override { return static_cast<int64_t>(text_.size()); }
  std::vector<TokenId> encode(std::string_view text, bool allow_special = false) const override;
  void append_token_bytes(TokenId id, std::string& out) const override;
  void append_token_bytes_after(TokenId previous, TokenId id, std::string& out) const override;
  nlohmann::json to_json() const override;

  // The id of a symbol spelled as in a codes file ("est</w>"), if the vocabulary has it.
  std::optional<TokenId> symbol_id(std::string_view symbol) const;
  // How a token is spelled: a symbol as in a codes file, a whitespace or byte id as "<0x0a>",
  // "<0x20 x3>" style names (for diagnostics).
  std::string token_name(TokenId id) const;
  bool is_symbol(TokenId id) const { return id >= kFirstSymbol && id < vocab_size(); }
  // True when decode puts a space between this token and a following symbol.
  bool ends_word(TokenId id) const { return id >= 0 && id < vocab_size() && implies_space_[static_cast<size_t>(id)]; }
  const SennrichBpe& bpe() const { return bpe_; }
  // Characters given beyond those the codes mention (sorted, distinct).
  const std::vector<std::string>& extra_alphabet() const { return extra_alphabet_; }

 private:
  SennrichTokenizer(SennrichBpe bpe, const std::vector<std::string>& alphabet);
  struct Cache;
  void encode_word(std::string_view word, Cache& cache, std::vector<TokenId>& out) const;
  void encode_stretch(std::string_view stretch, Cache& cache, std::vector<TokenId>& out) const;
  void encode_separator(std::string_view sep, std::vector<TokenId>& out) const;

  SennrichBpe bpe_;
  std::vector<std::string> extra_alphabet_;
  std::vector<std::string> text_;       // id -> bytes it decodes to
  std::vector<std::string> symbol_;     // id -> symbol spelling (symbols only)
  std::vector<uint8_t> implies_space_;  // id -> word-final symbol not ending in a kept break
  std::vector<TokenId> of_bpe_symbol_;  // SennrichBpe symbol id -> token id
  std::unordered_map<std::string, TokenId> symbol_ids_;
};

}  // namespace tformer
