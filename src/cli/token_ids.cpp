#include "cli/token_ids.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <exception>
#include <sstream>
#include <string_view>

#include "core/error.h"

namespace tformer::cli {

std::vector<TokenId> parse_ids(const std::string& text, const std::string& where) {
  std::vector<TokenId> ids;
  size_t i = 0;
  int64_t index = 0;
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  while (i < text.size()) {
    while (i < text.size() && space(text[i])) ++i;
    if (i >= text.size()) break;
    size_t j = i;
    while (j < text.size() && !space(text[j])) ++j;
    TokenId id = 0;
    const auto [end, ec] = std::from_chars(text.data() + i, text.data() + j, id);
    if (ec != std::errc() || end != text.data() + j || id < 0)
      fail(where.starts_with("--") ? ErrorKind::BadInput : ErrorKind::BadFile, where,
           "{}: id number {} ('{}') is not a token id", where, index, text.substr(i, std::min<size_t>(j - i, 40)));
    ids.push_back(id);
    ++index;
    i = j;
  }
  return ids;
}

std::vector<TokenId> parse_logits_tokens(const std::string& s) {
  std::vector<TokenId> ids;
  std::istringstream in(s);
  std::string word;
  while (in >> word) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || v < 0 || v > INT32_MAX)
      fail_input("--tokens", "--tokens: '{}' (token {}) is not a token id", word, ids.size());
    ids.push_back(static_cast<TokenId>(v));
  }
  return ids;
}

}  // namespace tformer::cli
