// SentencePiece BPE models (spm_train --model_type=bpe; Llama's tokenizer.model) as a Tokenizer:
// tformer's own reading of the .model file and its own encoder, with ids identical to the
// sentencepiece library's (tests/test_tokenizer_sentencepiece.cpp checks them against fixtures
// spm_encode wrote; libsentencepiece is never linked).
//
// The .model file is a protobuf ModelProto (sentencepiece_model.proto); the fields read:
//   pieces (1): piece (1), score (2), type (3: 1 normal, 2 unknown, 3 control, 4 user-defined,
//     5 unused, 6 byte)
//   trainer_spec (2): model_type (3; 2 = BPE, the only kind read), treat_whitespace_as_suffix (24),
//     byte_fallback (35), unk_surface (44)
//   normalizer_spec (3): name (1), precompiled_charsmap (2), add_dummy_prefix (3, default true),
//     remove_extra_whitespaces (4, default true), escape_whitespaces (5, default true)
// Every length and field is checked against the bytes left; a broken file is an error naming the
// field.
//
// Encoding, as sentencepiece does it:
//  1. Normalize: at each position the longest rule of the precompiled charsmap (a double-array
//     trie over bytes: u32 trie size, the trie's u32 units, then NUL-terminated replacement strings)
//     replaces its match; a user-defined piece is kept as it is; otherwise one UTF-8 character is
//     copied (a malformed byte becomes U+FFFD). With remove_extra_whitespaces, leading, trailing and
//     repeated spaces go. With add_dummy_prefix, a space is put in front. With escape_whitespaces,
//     each space becomes U+2581 "▁".
//  2. Split the result into characters (a user-defined piece is one symbol and never merges).
//  3. Repeatedly merge the adjacent pair whose concatenation is a piece of the highest score (the
//     leftmost on a tie); normal, user-defined and unused pieces take part, control, unknown and
//     byte pieces do not. A result that is an unused piece is split back into the two it was made of.
//  4. Each symbol is its piece's id. One that is no piece is unknown: with byte_fallback its bytes
//     become the <0xXX> pieces; without, it is the unknown id, and a run of unknown symbols is one
//     unknown id.
//
// Decoding: each piece's text with "▁" read as a space (byte pieces: their byte; control pieces:
// nothing; the unknown piece: unk_surface, " ⁇ " by default); the first token of a text loses the
// dummy prefix's space. SentencePiece is not exact on bytes as the other tokenizers are: it
// normalizes (NFKC for spm_train's default nmt_nfkc, which folds e.g. full-width letters) and drops
// extra whitespace, so decode(encode(x)) == x only for text that is already normalized.
//
// JSON form: {"kind": "sentencepiece", "version": 1, "pieces": [[text, score, type], ...],
//   "normalizer": {"name", "precompiled_charsmap" (base64), "add_dummy_prefix",
//   "remove_extra_whitespaces", "escape_whitespaces"}, "byte_fallback", "treat_whitespace_as_suffix",
//   "llama_cpp", "unk_surface", and "bos" / "eos" (ids) when set}.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace tformer {

class SentencePieceTokenizer : public Tokenizer {
 public:
  enum class PieceType : int { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };
  struct Piece {
    std::string text;
    float score = 0;
    PieceType type = PieceType::Normal;
  };
  struct Normalizer {
    std::string name;
    std::string charsmap;  // the precompiled charsmap blob; empty: no rules (identity)
    bool add_dummy_prefix = true;
    bool remove_extra_whitespaces = true;
    bool escape_whitespaces = true;
  };

  // The bytes of a .model file; `source` names it in errors.
  static SentencePieceTokenizer from_model_proto(std::string_view bytes, const std::string& source);
  static SentencePieceTokenizer load(const std::string& path);
  static SentencePieceTokenizer from_json(const nlohmann::json& j);
  // A vocabulary given piece by piece (GGUF's "llama" tokenizers): no normalization rules.
  SentencePieceTokenizer(std::vector<Piece> pieces, Normalizer normalizer, bool byte_fallback,
                         std::string unk_surface = " \xE2\x81\x87 ");
  ~SentencePieceTokenizer() override;
  SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept;
  SentencePieceTokenizer& operator=(SentencePieceTokenizer&&) noexcept;

  std::string kind() const override { return "sentencepiece"; }
  int64_t vocab_size() const override { return static_cast<int64_t>(pieces_.size()); }
  // allow_special: SentencePiece never reads control pieces from text; under llama.cpp's rules
  // (set_llama_cpp_rules) it does, as llama.cpp's parse_special.
  std::vector<TokenId> encode(std::string_view text, bool allow_special = false) const override;
  void append_token_bytes(TokenId id, std::string& out) const override;
  void append_token_bytes_after(TokenId previous, TokenId id, std::string& out) const override;
  std::map<std::string, TokenId> special_tokens() const override;
  nlohmann::json to_json() const override;

  // Step 1 alone (tests compare it with sentencepiece's normalizer).
  std::string normalize(std::string_view input) const;
  const std::vector<Piece>& pieces() const { return pieces_; }
  const Normalizer& normalizer() const { return normalizer_; }
  bool byte_fallback() const { return byte_fallback_; }
  bool whitespace_as_suffix() const { return whitespace_suffix_; }
  // llama.cpp's reading of a "llama" vocabulary (GGUF import): user-defined pieces (and, with
  // allow_special, control pieces) cut the text first, each stretch between them is encoded alone,
  // with the space prefix in front of the first and of each one after such a piece; no other
  // normalization. sentencepiece itself instead matches user-defined pieces while splitting, and
  // puts the dummy prefix only at the start.
  void set_llama_cpp_rules(bool on) { llama_cpp_ = on; }
  bool llama_cpp_rules() const { return llama_cpp_; }
  TokenId unk_id() const { return unk_id_; }
  // The BOS put before every text given to the model, and the EOS generation stops at: none
  // unless set (a GGUF file's add_bos_token / bos_token_id / eos_token_id, a Hugging Face
  // folder's tokenizer_config.json). Throws Error for an id outside the vocabulary.
  void set_bos(std::optional<TokenId> id);
  void set_eos(std::optional<TokenId> id);
  std::optional<TokenId> bos_id() const override { return bos_; }
  std::optional<TokenId> eot_id() const override { return eos_ ? eos_ : Tokenizer::eot_id(); }

 private:
  struct Trie;
  void build();
  // Steps 2-4 on normalized text, appending to ids.
  void encode_normalized(std::string_view normalized, std::vector<TokenId>& ids) const;
  // The longest user-defined piece at the start of s (0 when none).
  size_t user_defined_prefix(std::string_view s) const;
  // The longest charsmap rule at the start of s: its length and replacement (length 0: none).
  std::pair<size_t, std::string_view> charsmap_prefix(std::string_view s) const;

  std::vector<Piece> pieces_;
  Normalizer normalizer_;
  bool byte_fallback_ = false;
  bool whitespace_suffix_ = false;
  bool llama_cpp_ = false;
  std::optional<TokenId> bos_, eos_;
  std::string unk_surface_;
  std::string model_bytes_;  // the .model file this came from, kept for to_json (empty: built)
  TokenId unk_id_ = -1;
  std::unordered_map<std::string, TokenId> mergeable_;               // normal, user-defined and unused pieces
  std::unordered_map<std::string, TokenId> reserved_;                // control, unknown and byte pieces
  std::vector<TokenId> byte_id_;                                     // byte -> its <0xXX> piece, -1 when absent
  std::vector<std::string> user_defined_;                            // longest first
  std::vector<std::pair<std::string, TokenId>> specials_by_length_;  // user-defined and control pieces
  std::unique_ptr<Trie> trie_;
};

// Standard base64 (RFC 4648, with padding), for the JSON form; decoding errors name `what`.
std::string base64_encode(std::string_view bytes);
std::string base64_decode(std::string_view text, const std::string& what);

}  // namespace tformer
