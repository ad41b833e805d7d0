#include "tokenizer/tokenizer.h"

#include <cstring>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "core/file_io.h"
#include "core/utf8.h"
#include "tokenizer/byte_bpe.h"
#include "tokenizer/char_tokenizer.h"
#include "tokenizer/sennrich_tokenizer.h"
#include "tokenizer/sentencepiece.h"

namespace tformer {

std::string Tokenizer::decode(std::span<const TokenId> ids) const {
  std::string out;
  TokenId previous = -1;
  for (TokenId id : ids) {
    append_token_bytes_after(previous, id, out);
    previous = id;
  }
  return out;
}

std::optional<TokenId> Tokenizer::special_id(std::string_view text) const {
  const auto specials = special_tokens();
  auto it = specials.find(std::string(text));
  if (it == specials.end()) return std::nullopt;
  return it->second;
}

size_t next_cut_point(std::string_view text, size_t from) {
  auto printable = [](char c) { return c > 0x20 && c < 0x7f; };
  for (size_t i = from == 0 ? 0 : from - 1; i + 1 < text.size(); ++i) {
    const void* nl = std::memchr(text.data() + i, '\n', text.size() - 1 - i);
    if (!nl) break;
    i = static_cast<size_t>(static_cast<const char*>(nl) - text.data());
    if (i >= 1 && printable(text[i - 1]) && printable(text[i + 1])) return i + 1;
  }
  return std::string_view::npos;
}

std::vector<TokenId> encode_for_model(const Tokenizer& tok, std::string_view text, bool allow_special) {
  std::vector<TokenId> ids;
  if (const auto bos = tok.bos_id()) ids.push_back(*bos);
  const std::vector<TokenId> rest = tok.encode(text, allow_special);
  ids.insert(ids.end(), rest.begin(), rest.end());
  return ids;
}

std::unique_ptr<Tokenizer> tokenizer_from_json(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("kind") || !j["kind"].is_string())
    fail_file("kind", "tokenizer JSON: expected an object with a string \"kind\"");
  const std::string kind = j["kind"].get<std::string>();
  if (kind == "char") return std::make_unique<CharTokenizer>(CharTokenizer::from_json(j));
  if (kind == "byte-bpe") return std::make_unique<ByteBpeTokenizer>(ByteBpeTokenizer::from_json(j));
  if (kind == "bpe") return std::make_unique<SennrichTokenizer>(SennrichTokenizer::from_json(j));
  if (kind == "sentencepiece") return std::make_unique<SentencePieceTokenizer>(SentencePieceTokenizer::from_json(j));
  fail_unsupported("kind", "tokenizer JSON: unknown kind '{}' (known: char, bpe, byte-bpe, sentencepiece)", kind);
}

std::vector<TokenId> non_token_ids(const Tokenizer& tokenizer, int64_t n) {
  std::vector<TokenId> ids;
  for (int64_t id = 0; id < n; ++id)
    if (!tokenizer.is_token(static_cast<TokenId>(id))) ids.push_back(static_cast<TokenId>(id));
  return ids;
}

std::unique_ptr<Tokenizer> load_tokenizer_file(const std::string& path) {
  const std::string text = read_file(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail_file(path, "{}: not a valid tokenizer JSON file: {}", path, e.what());
  }
  // A checkpoint's header may carry the tokenizer under "tokenizer".
  if (j.is_object() && !j.contains("kind") && j.contains("tokenizer")) j = j["tokenizer"];
  try {
    return tokenizer_from_json(j);
  } catch (const Error& e) {
    throw e.with_context(path);
  }
}

void save_tokenizer_file(const Tokenizer& tokenizer, const std::string& path) {
  write_file_atomic(path, tokenizer.to_json().dump() + "\n");
}

#ifndef TFORMER_GPT2_DEFAULT_DIR
#define TFORMER_GPT2_DEFAULT_DIR "build-data/gpt2"
#endif

std::string gpt2_vocab_dir(const std::string& override_dir) {
  std::string dir = override_dir;
  std::string source = "--gpt2-dir";
  if (dir.empty()) {
    if (const char* env = std::getenv("TFORMER_GPT2_DIR"); env && *env) {
      dir = env;
      source = "$TFORMER_GPT2_DIR";
    } else {
      dir = TFORMER_GPT2_DEFAULT_DIR;
      source = "the default location";
    }
  }
  namespace fs = std::filesystem;
  if (!fs::is_regular_file(fs::path(dir) / "encoder.json") || !fs::is_regular_file(fs::path(dir) / "vocab.bpe"))
    fail_file(dir,
              "GPT-2's vocabulary is not in {} ({}): expected encoder.json and vocab.bpe there; run "
              "scripts/fetch-gpt2-vocab.sh, or pass --gpt2-dir / set TFORMER_GPT2_DIR",
              dir, source);
  return dir;
}

#ifndef TFORMER_TIKTOKEN_DEFAULT_DIR
#define TFORMER_TIKTOKEN_DEFAULT_DIR "build-data/tiktoken"
#endif

// tiktoken's cl100k_base or o200k_base from $TFORMER_TIKTOKEN_DIR or build-data/tiktoken (put
// there by scripts/fetch-tiktoken-vocab.sh from the npm package tiktoken; never downloaded here).
std::unique_ptr<Tokenizer> load_tiktoken_encoding(const std::string& name) {
  const char* env = std::getenv("TFORMER_TIKTOKEN_DIR");
  const std::string dir = env && *env ? env : TFORMER_TIKTOKEN_DEFAULT_DIR;
  const std::string path = (std::filesystem::path(dir) / (name + ".json")).string();
  if (!std::filesystem::is_regular_file(path))
    fail_file(
        path,
        "tiktoken's {} vocabulary is not at {}: run scripts/fetch-tiktoken-vocab.sh (or set TFORMER_TIKTOKEN_DIR)",
        name, path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail_file(path, "{}: not valid JSON: {}", path, e.what());
  }
  return std::make_unique<ByteBpeTokenizer>(ByteBpeTokenizer::from_tiktoken(j, path));
}

std::unique_ptr<Tokenizer> tokenizer_by_name(const std::string& name, const std::string& gpt2_dir) {
  if (name == "cl100k_base" || name == "o200k_base") return load_tiktoken_encoding(name);
  if (name == "gpt2")
    return std::make_unique<ByteBpeTokenizer>(ByteBpeTokenizer::load_gpt2_dir(gpt2_vocab_dir(gpt2_dir)));
  if (name == "char") return std::make_unique<CharTokenizer>(CharTokenizer::bytes());
  if (name.starts_with("bpe:")) {
    const std::string codes = name.substr(4);
    if (codes.empty()) fail_input(name, "tokenizer '{}': expected bpe:CODES, the path of a codes file", name);
    return std::make_unique<SennrichTokenizer>(SennrichTokenizer::load_codes(codes));
  }
  if (name.starts_with("spm:"))
    return std::make_unique<SentencePieceTokenizer>(SentencePieceTokenizer::load(name.substr(4)));
  if (name.starts_with("byte-bpe:")) {
    const std::string vocab = name.substr(9);
    if (vocab.empty())
      fail_input(name, "tokenizer '{}': expected byte-bpe:VOCAB, a tokenizer JSON file or a folder", name);
    if (std::filesystem::is_directory(vocab))
      return std::make_unique<ByteBpeTokenizer>(ByteBpeTokenizer::load_gpt2_dir(vocab));
    if (!std::filesystem::exists(vocab)) fail_file(vocab, "tokenizer '{}': no such file or folder '{}'", name, vocab);
    auto tok = load_tokenizer_file(vocab);
    if (tok->kind() != "byte-bpe")
      fail_file(vocab, "{}: a '{}' tokenizer, not a byte-level BPE vocabulary ('byte-bpe')", vocab, tok->kind());
    return tok;
  }
  if (!std::filesystem::exists(name))
    fail_input(name,
               "tokenizer '{}': not 'gpt2', 'cl100k_base', 'o200k_base', 'char', 'bpe:CODES', 'byte-bpe:VOCAB' or "
               "'spm:MODEL', and no such file",
               name);
  return load_tokenizer_file(name);
}

StreamingDecoder::StreamingDecoder(const Tokenizer& tokenizer, TokenId previous)
    : tokenizer_(tokenizer), previous_(previous) {
  pending_.reserve(256);
}

std::string_view StreamingDecoder::feed(TokenId id) {
  pending_.erase(0, returned_);  // shifts the waiting bytes down; keeps the capacity
  tokenizer_.append_token_bytes_after(previous_, id, pending_);
  previous_ = id;
  size_t i = 0;
  while (i < pending_.size()) {
    const int n = utf8_char_length(std::string_view(pending_).substr(i));
    if (n < 0) break;                          // unfinished character: wait for more bytes
    i += n == 0 ? 1 : static_cast<size_t>(n);  // an invalid byte goes out as it is
  }
  returned_ = i;
  return std::string_view(pending_).substr(0, i);
}

std::string_view StreamingDecoder::flush() {
  pending_.erase(0, returned_);
  returned_ = pending_.size();
  return pending_;
}

}  // namespace tformer
