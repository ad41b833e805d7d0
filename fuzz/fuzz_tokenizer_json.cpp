// libFuzzer target: tformer's tokenizer files (tokenizer/tokenizer.h, tokenizer_from_json: the
// "char", "byte-bpe" and "bpe" forms, as `tformer tokenizer train` writes them and model files carry
// them). Bytes that are not JSON are skipped (nlohmann's parser is not under test); a parsed value
// goes to tokenizer_from_json, and a tokenizer it accepts encodes a fixed text and the input itself
// (special tokens allowed), and decodes every id it produced and the first few hundred ids of its
// vocabulary. Every id encode() returns must be a token of the vocabulary.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  tformer::fuzz::expect_clean([&] {
    const auto tok = tformer::tokenizer_from_json(j);
    const std::string_view input(reinterpret_cast<const char*>(data), std::min<size_t>(size, 4096));
    for (const std::string_view text : {std::string_view("Hello, world! It's 2026 \xc3\xa9t\xc3\xa9."), input}) {
      tformer::fuzz::expect_clean([&] {
        const std::vector<tformer::TokenId> ids = tok->encode(text, /*allow_special=*/true);
        for (const tformer::TokenId id : ids)
          if (id < 0 || id >= tok->vocab_size()) std::abort();
        (void)tok->decode(ids);
      });
    }
    std::string out;
    for (tformer::TokenId id = 0; id < std::min<int64_t>(tok->vocab_size(), 300); ++id)
      tformer::fuzz::expect_clean([&] { tok->append_token_bytes(id, out); });
  });
  return 0;
}
