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
  j["pattern"] = pattern_ == Pattern::Gpt2 ? "gpt2" : "llama.cpp-default";
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
  if (pattern != "gpt2" && pattern != "llama.cpp-default")
    fail_unsupported("pattern", "byte-bpe JSON: unsupported \"pattern\" (expected \"gpt2\" or \"llama.cpp-default\")");
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
    if (pattern == "llama.cpp-default") tok.set_pattern(Pattern::LlamaCppDefault);
    return tok;
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::BadInput) throw;
    throw Error(ErrorKind::BadFile, e.field(), e.what());  // the JSON's contents are bad, not a caller's data
  }
}

}  // namespace tformer
