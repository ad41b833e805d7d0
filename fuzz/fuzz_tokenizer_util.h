// What the fuzz targets that end in a tokenizer (fuzz/fuzz_util.h) check once a reader has accepted
// one: it encodes a fixed text and the input's own first bytes (special tokens allowed), every id
// must be a token of its vocabulary, what it encoded decodes, and the first few hundred ids decode
// one by one. A tformer::Error that is not Internal is still a clean refusal (an id that is no
// token, say); anything else aborts.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

namespace tformer::fuzz {

inline void check_tokenizer(const Tokenizer& tok, std::string_view input) {
  input = input.substr(0, std::min<size_t>(input.size(), 4096));
  for (const std::string_view text : {std::string_view("Hello, world! It's 2026 \xc3\xa9t\xc3\xa9.\n\tx  y"), input}) {
    for (const bool special : {false, true}) {
      expect_clean([&] {
        const std::vector<TokenId> ids = tok.encode(text, special);
        for (const TokenId id : ids)
          if (id < 0 || id >= tok.vocab_size()) std::abort();
        (void)tok.decode(ids);
      });
    }
  }
  std::string out;
  for (TokenId id = 0; id < std::min<int64_t>(tok.vocab_size(), 300); ++id)
    expect_clean([&] { tok.append_token_bytes(id, out); });
  expect_clean([&] { (void)tok.to_json(); });
}

}  // namespace tformer::fuzz
