#include "tokenizer/char_tokenizer.h"

#include "core/error.h"

namespace tformer {

CharTokenizer::CharTokenizer(std::vector<unsigned char> alphabet) : alphabet_(std::move(alphabet)) {
  id_of_.fill(-1);
  for (size_t i = 0; i < alphabet_.size(); ++i) {
    TokenId& slot = id_of_[alphabet_[i]];
    if (slot >= 0)
      fail_input(fmt::format("byte {}", alphabet_[i]),
                 "char tokenizer: byte {} appears twice in the alphabet (ids {} and {})", alphabet_[i], slot, i);
    slot = static_cast<TokenId>(i);
  }
}

CharTokenizer CharTokenizer::bytes() {
  std::vector<unsigned char> all(256);
  for (int b = 0; b < 256; ++b) all[b] = static_cast<unsigned char>(b);
  return CharTokenizer(std::move(all));
}

CharTokenizer CharTokenizer::from_corpus(std::string_view corpus) {
  std::array<bool, 256> seen{};
  for (char c : corpus) seen[static_cast<unsigned char>(c)] = true;
  std::vector<unsigned char> alphabet;
  for (int b = 0; b < 256; ++b)
    if (seen[b]) alphabet.push_back(static_cast<unsigned char>(b));
  return CharTokenizer(std::move(alphabet));
}

CharTokenizer CharTokenizer::from_json(const nlohmann::json& j) {
  if (!j.is_object() || j.value("kind", "") != "char")
    fail_file("kind", "char tokenizer JSON: \"kind\" is not \"char\"");
  if (!j.contains("version") || j["version"] != 1)
    fail_unsupported("version", "char tokenizer JSON: unsupported \"version\" (expected 1)");
  if (!j.contains("bytes") || !j["bytes"].is_array())
    fail_file("bytes", "char tokenizer JSON: missing array \"bytes\"");
  std::vector<unsigned char> alphabet;
  for (size_t i = 0; i < j["bytes"].size(); ++i) {
    const auto& v = j["bytes"][i];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 255)
      fail_file("bytes", "char tokenizer JSON: \"bytes\"[{}] = {} is not a byte value 0..255", i, v.dump());
    alphabet.push_back(static_cast<unsigned char>(v.get<int>()));
  }
  try {
    return CharTokenizer(std::move(alphabet));
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::BadInput) throw;
    throw Error(ErrorKind::BadFile, e.field(), e.what());  // the JSON's contents are bad, not a caller's data
  }
}

std::vector<TokenId> CharTokenizer::encode(std::string_view text, bool /*allow_special*/) const {
  std::vector<TokenId> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char b = static_cast<unsigned char>(text[i]);
    const TokenId id = id_of_[b];
    if (id < 0) [[unlikely]]
      fail_input(fmt::format("position {}", i),
                 "char tokenizer: byte {} (0x{:02x}) at position {} is not in the vocabulary of {} bytes", b, b, i,
                 alphabet_.size());
    ids[i] = id;
  }
  return ids;
}

void CharTokenizer::append_token_bytes(TokenId id, std::string& out) const {
  if (id < 0 || static_cast<size_t>(id) >= alphabet_.size()) [[unlikely]]
    fail_input(fmt::format("token id {}", id), "char tokenizer: token id {} is outside the vocabulary (size {})", id,
               alphabet_.size());
  out.push_back(static_cast<char>(alphabet_[static_cast<size_t>(id)]));
}

nlohmann::json CharTokenizer::to_json() const {
  nlohmann::json j;
  j["kind"] = "char";
  j["version"] = 1;
  j["bytes"] = alphabet_;
  return j;
}

}  // namespace tformer
