// The one tokenizer interface the model sees: text (raw bytes) -> token ids -> text.
//
// Every tokenizer is exact on bytes: decode(encode(x)) == x for every byte string x, invalid UTF-8
// included. Kinds (kind()):
//   "char"      CharTokenizer (char_tokenizer.h): one id per byte.
//   "byte-bpe"  ByteBpeTokenizer (byte_bpe.h): GPT-2's byte-level BPE, or one trained the same way.
//   "bpe"       SennrichTokenizer (sennrich_tokenizer.h): Sennrich BPE symbols, plus whitespace and
//               byte-fallback ids; a single space between two words is implied by the ids around it.
//
// A tokenizer serialises to JSON (to_json) for a checkpoint's header; tokenizer_from_json reads it
// back, and the result encodes to identical ids. Every JSON form has "kind" and "version".
//
// Special tokens (e.g. GPT-2's "<|endoftext|>" = 50256) are recognised in encode's input only when
// allow_special is true; otherwise their text is ordinary text (tiktoken's encode_ordinary).
//
// Printing while generating: StreamingDecoder takes ids one at a time and returns only whole UTF-8
// characters, so a multi-byte character split over two tokens is never printed in halves:
//
//   StreamingDecoder out(tok);
//   for (TokenId id : generated) fmt::print("{}", out.feed(id));
//   fmt::print("{}", out.flush());
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.h"

namespace tformer {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // "char", "byte-bpe", "bpe".
  virtual std::string kind() const = 0;
  // Ids are 0 .. vocab_size() - 1, special tokens included.
  virtual int64_t vocab_size() const = 0;
  // Whether id is a token: in range, and not one of the unused ids some vocabularies have among
  // their special tokens (tiktoken's cl100k_base: 100256 and 100261..100275). Generation never
  // samples an id that is not a token.
  virtual bool is_token(TokenId id) const { return id >= 0 && id < vocab_size(); }

  virtual std::vector<TokenId> encode(std::string_view text, bool allow_special = false) const = 0;
  // Appends the bytes of one token to out; an id outside [0, vocab_size()) throws Error naming it.
  virtual void append_token_bytes(TokenId id, std::string& out) const = 0;
  // Appends the bytes token id adds to a text when it follows token `previous` (previous < 0: id
  // comes first). For "char" and "byte-bpe" this is append_token_bytes; "bpe" also writes here the
  // space that separates two words, which no id spells out (sennrich_tokenizer.h).
  virtual void append_token_bytes_after(TokenId previous, TokenId id, std::string& out) const {
    (void)previous;
    append_token_bytes(id, out);
  }
  // The text of the tokens (append_token_bytes_after over the sequence); throws Error naming the
  // first id out of range.
  std::string decode(std::span<const TokenId> ids) const;

  // Special tokens by their text; empty when the tokenizer has none.
  virtual std::map<std::string, TokenId> special_tokens() const { return {}; }
  std::optional<TokenId> special_id(std::string_view text) const;
  // The end-of-text token, when the vocabulary has one: GPT-2's "<|endoftext|>", or the EOS a
  // SentencePiece vocabulary names (sentencepiece.h). Generation stops at it.
  virtual std::optional<TokenId> eot_id() const { return special_id("<|endoftext|>"); }
  // The token a model of this vocabulary expects before every text it reads (llama.cpp's
  // tokenizer.ggml.add_bos_token; Llama's "<s>"), when it expects one. encode() never adds it:
  // encode_for_model() below does, for the commands that feed text to a model (generate, eval).
  virtual std::optional<TokenId> bos_id() const { return std::nullopt; }

  virtual nlohmann::json to_json() const = 0;
  // Whether a long text may be encoded in pieces cut by next_cut_point (below): true for "char",
  // "bpe", and "byte-bpe" with GPT-2's, cl100k_base's or o200k_base's pattern and no special token
  // holding a newline; false (the text is encoded whole) for SentencePiece, whose normaliser sees
  // the text as a whole, and for llama.cpp's default pattern chain. Tested on corpora against
  // encoding the text whole (tests/test_tokenizer_interface.cpp).
  virtual bool cuts_at_lines() const { return false; }
};

// The first cut point p >= from of text, or npos when there is none: p lies just after a '\n'
// that has a printable ASCII byte (0x21..0x7e) on each side ("word.\nNext"). For a tokenizer with
// cuts_at_lines(), encode(text) equals encode(text[0, p)) followed by encode(text[p, n)), with or
// without special tokens: each pre-tokenizer ends a piece at such a newline and starts the next one
// after it whatever surrounds them (the patterns have no look-behind, and their look-ahead sees
// only the printable byte), and no special token spans it.
size_t next_cut_point(std::string_view text, size_t from);

// encode(text), with bos_id() in front when the vocabulary has one.
std::vector<TokenId> encode_for_model(const Tokenizer& tok, std::string_view text, bool allow_special = false);

// Builds a tokenizer from its to_json() form; throws Error on an unknown kind or a malformed form.
std::unique_ptr<Tokenizer> tokenizer_from_json(const nlohmann::json& j);
// The ids in [0, n) that are not tokens of the tokenizer (is_token): the unused ids among its
// special tokens, and any beyond its vocabulary (a model's vocabulary padded to a rounder size).
std::vector<TokenId> non_token_ids(const Tokenizer& tokenizer, int64_t n);
// Reads a file holding a to_json() form (errors name the file).
std::unique_ptr<Tokenizer> load_tokenizer_file(const std::string& path);
// Writes to_json() and a newline to a file, atomically (core/file_io.h); errors name the file.
void save_tokenizer_file(const Tokenizer& tokenizer, const std::string& path);

// The folder holding GPT-2's encoder.json and vocab.bpe: override_dir when not empty, else
// $TFORMER_GPT2_DIR when set, else build-data/gpt2 in the source tree (where
// scripts/fetch-gpt2-vocab.sh puts them). Throws Error naming the folder tried when the files are
// not there, and how to fetch them.
std::string gpt2_vocab_dir(const std::string& override_dir = "");
// A tokenizer by name: "gpt2" (GPT-2's vocabulary, from gpt2_vocab_dir(gpt2_dir)), "cl100k_base"
// and "o200k_base" (tiktoken's, from $TFORMER_TIKTOKEN_DIR or build-data/tiktoken), "char" (the
// 256-byte char tokenizer), "bpe:CODES" (Sennrich BPE from a codes file, as `tformer bpe learn`
// or subword-nmt writes it; sennrich_tokenizer.h), "byte-bpe:VOCAB" (a byte-level BPE vocabulary:
// a tokenizer JSON file of kind "byte-bpe", as `tformer tokenizer train` writes it, or a folder
// holding encoder.json and vocab.bpe), or else the path of a saved tokenizer file (to_json form).
// A model file (.safetensors) is read by tokenizer_by_name_or_model (model/checkpoint.h).
std::unique_ptr<Tokenizer> tokenizer_by_name(const std::string& name, const std::string& gpt2_dir = "");

// Decodes ids one at a time, as generation prints them. feed() returns the bytes that now form
// complete UTF-8 characters, together with bytes that are definitely not valid UTF-8 (these come
// out as they are); a valid but unfinished character waits for the next token. flush() returns
// what is still waiting (an unfinished character at the end comes out as its raw bytes). The
// concatenation of every feed() and the final flush() equals tokenizer.decode(all ids) exactly,
// and on valid UTF-8 output each returned chunk is itself valid UTF-8. When the ids continue a
// prompt, pass the prompt's last id as `previous`, so that a "bpe" tokenizer writes the space
// between the prompt's last word and the first generated one.
//
// The returned view points into the decoder's own buffer and is valid until the next call. The
// buffer is reserved once, so streaming a generation allocates nothing (a token longer than any
// before may grow it once).
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tokenizer, TokenId previous = -1);
  std::string_view feed(TokenId id);
  std::string_view flush();

 private:
  const Tokenizer& tokenizer_;
  TokenId previous_;
  std::string pending_;  // the bytes returned by the last call, then those still waiting
  size_t returned_ = 0;  // how many bytes at the front of pending_ the last call returned
};

}  // namespace tformer
