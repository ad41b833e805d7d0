// The byte-level BPE tokenizer's files: GPT-2's encoder.json and vocab.bpe (load_gpt2, save_gpt2)
// and the tokenizer JSON form (to_json, from_json).
#include <array>
#include <climits>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/file_io.h"
#include "tokenizer/byte_bpe.h"
#include "tokenizer/sentencepiece.h"

namespace tformer {
namespace {

std::string spelled(std::string_view bytes) { return gpt2_bytes_to_unicode(bytes); }

}  // namespace

ByteBpeTokenizer ByteBpeTokenizer::load_gpt2(const std::string& encoder_path, const std::string& vocab_path) {
  nlohmann::json encoder;
  try {
    encoder = nlohmann::json::parse(read_file(encoder_path));
  } catch (const nlohmann::json::exception& e) {
    fail_file(encoder_path, "{}: not valid JSON: {}", encoder_path, e.what());
  }
  return from_gpt2_vocab(encoder, read_file(vocab_path), encoder_path, vocab_path);
}

ByteBpeTokenizer ByteBpeTokenizer::from_gpt2_vocab(const nlohmann::json& encoder, std::string_view text,
                                                   const std::string& encoder_path, const std::string& vocab_path) {
  // encoder.json: {"token": id}
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
  // Special tokens too are spelled in GPT-2's alphabet, as load_gpt2 reads every token
  // ("<|endoftext|>" spells itself).
  for (size_t id = 0; id < tokens_.size(); ++id) encoder[gpt2_bytes_to_unicode(tokens_[id])] = id;
  std::string vocab = "#version: 0.2\n";
  for (const auto& [left, right] : merges_)
    vocab += gpt2_bytes_to_unicode(tokens_[left]) + " " + gpt2_bytes_to_unicode(tokens_[right]) + "\n";
  write_file_atomic(encoder_path, encoder.dump());
  write_file_atomic(vocab_path, vocab);
}

namespace {

// tiktoken's pat_str of each encoding tformer computes, as its encoder files hold them.
constexpr const char* kTiktokenCl100k =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kTiktokenO200k =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

}  // namespace

ByteBpeTokenizer ByteBpeTokenizer::from_tiktoken(const nlohmann::json& j, const std::string& path) {
  if (!j.is_object() || !j.contains("pat_str") || !j["pat_str"].is_string() || !j.contains("bpe_ranks") ||
      !j["bpe_ranks"].is_string())
    fail_file(path, "{}: not a tiktoken encoder file (expected \"pat_str\", \"special_tokens\", \"bpe_ranks\")", path);
  const std::string pat = j["pat_str"].get<std::string>();
  Pattern pattern = Pattern::Cl100k;
  if (pat == kTiktokenO200k)
    pattern = Pattern::O200k;
  else if (pat != kTiktokenCl100k)
    fail_unsupported("pat_str", "{}: pat_str is not cl100k_base's or o200k_base's pattern: tformer computes those",
                     path);
  // The tokens by rank.
  std::vector<std::string> by_rank;
  const std::string& text = j["bpe_ranks"].get_ref<const std::string&>();
  size_t at = 0;
  auto next_word = [&]() -> std::string_view {
    while (at < text.size() && text[at] == ' ') ++at;
    const size_t start = at;
    while (at < text.size() && text[at] != ' ') ++at;
    return std::string_view(text).substr(start, at - start);
  };
  for (std::string_view w = next_word(); !w.empty(); w = next_word()) {
    if (w == "!") {
      const std::string_view off = next_word();
      if (off != std::to_string(by_rank.size()))
        fail_file("bpe_ranks", "{}: bpe_ranks: a run starts at rank {}, expected {} (ranks must be 0..n-1)", path, off,
                  by_rank.size());
      continue;
    }
    by_rank.push_back(base64_decode(w, "bpe_ranks"));
    if (by_rank.back().empty()) fail_file("bpe_ranks", "{}: bpe_ranks: rank {} is empty", path, by_rank.size() - 1);
  }
  if (by_rank.size() < 256) fail_file("bpe_ranks", "{}: bpe_ranks has {} tokens, fewer than 256", path, by_rank.size());
  std::array<unsigned char, 256> byte_of_id{};
  for (size_t r = 0; r < 256; ++r) {
    if (by_rank[r].size() != 1)
      fail_unsupported("bpe_ranks", "{}: rank {} is not a single byte: tformer needs the 256 bytes first", path, r);
    byte_of_id[r] = static_cast<unsigned char>(by_rank[r][0]);
  }
  std::unordered_map<std::string_view, TokenId> rank_of;
  rank_of.reserve(by_rank.size());
  for (size_t r = 0; r < by_rank.size(); ++r)
    if (!rank_of.emplace(by_rank[r], static_cast<TokenId>(r)).second)
      fail_file("bpe_ranks", "{}: bpe_ranks: rank {} repeats the token of rank {}", path, r, rank_of[by_rank[r]]);
  // Each larger token: tiktoken's merging (lowest-ranked concatenation first, leftmost on a tie)
  // over its bytes with ranks below its own must end in two parts, its merge.
  std::vector<Merge> merges;
  merges.reserve(by_rank.size() - 256);
  std::vector<std::string_view> parts;
  for (size_t r = 256; r < by_rank.size(); ++r) {
    const std::string_view t = by_rank[r];
    parts.clear();
    for (size_t i = 0; i < t.size(); ++i) parts.push_back(t.substr(i, 1));
    while (parts.size() > 2) {
      TokenId best = -1;
      size_t where = 0;
      for (size_t i = 0; i + 1 < parts.size(); ++i) {
        const std::string_view both(parts[i].data(), parts[i].size() + parts[i + 1].size());
        const auto it = rank_of.find(both);
        if (it != rank_of.end() && it->second < static_cast<TokenId>(r) && (best < 0 || it->second < best)) {
          best = it->second;
          where = i;
        }
      }
      if (best < 0) break;
      parts[where] = std::string_view(parts[where].data(), parts[where].size() + parts[where + 1].size());
      parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(where) + 1);
    }
    const auto a = parts.size() == 2 ? rank_of.find(parts[0]) : rank_of.end();
    const auto b = parts.size() == 2 ? rank_of.find(parts[1]) : rank_of.end();
    if (a == rank_of.end() || b == rank_of.end() || a->second >= static_cast<TokenId>(r) ||
        b->second >= static_cast<TokenId>(r))
      fail_unsupported("bpe_ranks", "{}: rank {} is not one merge of two lower-ranked tokens", path, r);
    merges.emplace_back(a->second, b->second);
  }
  std::map<std::string, TokenId> specials;
  if (j.contains("special_tokens")) {
    if (!j["special_tokens"].is_object()) fail_file("special_tokens", "{}: special_tokens is not an object", path);
    for (const auto& [name, id] : j["special_tokens"].items()) {
      if (!id.is_number_integer())
        fail_file("special_tokens", "{}: special token '{}' has id {}, not an integer", path, name, id.dump());
      specials.emplace(name, id.get<TokenId>());
    }
  }
  try {
    ByteBpeTokenizer tok(byte_of_id, std::move(merges), std::move(specials));
    tok.set_pattern(pattern);
    return tok;
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::BadInput) throw;
    fail_file(e.field(), "{}: {}", path, e.what());
  }
}

const char* ByteBpeTokenizer::pattern_name(Pattern p) {
  switch (p) {
    case Pattern::Gpt2:
      return "gpt2";
    case Pattern::LlamaCppDefault:
      return "llama.cpp-default";
    case Pattern::Cl100k:
      return "cl100k";
    case Pattern::O200k:
      return "o200k";
  }
  return "gpt2";
}

std::optional<ByteBpeTokenizer::Pattern> ByteBpeTokenizer::pattern_of(std::string_view name) {
  for (Pattern p : {Pattern::Gpt2, Pattern::LlamaCppDefault, Pattern::Cl100k, Pattern::O200k})
    if (name == pattern_name(p)) return p;
  return std::nullopt;
}

bool ByteBpeTokenizer::cuts_at_lines() const {
  if (pattern_ == Pattern::LlamaCppDefault) return false;
  for (const auto& [text, id] : specials_)
    if (text.find('\n') != std::string::npos) return false;
  return true;
}

nlohmann::json ByteBpeTokenizer::to_json() const {
  nlohmann::json j;
  j["kind"] = "byte-bpe";
  j["version"] = 1;
  j["pattern"] = pattern_name(pattern_);
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
  const std::string pattern = j.contains("pattern") && j["pattern"].is_string() ? j["pattern"].get<std::string>() : "";
  if (!pattern_of(pattern))
    fail_unsupported("pattern", "byte-bpe JSON: unsupported \"pattern\" '{}' (gpt2, llama.cpp-default, cl100k, o200k)",
                     pattern);
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
    ByteBpeTokenizer tok(byte_of_id, std::move(merges), std::move(specials));
    tok.set_pattern(*pattern_of(pattern));
    return tok;
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::BadInput) throw;
    throw Error(ErrorKind::BadFile, e.field(), e.what());  // the JSON's contents are bad, not a caller's data
  }
}

}  // namespace tformer
