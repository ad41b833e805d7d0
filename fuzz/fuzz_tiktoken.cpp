// libFuzzer target: tiktoken's encoder files (tokenizer/byte_bpe.h, ByteBpeTokenizer::from_tiktoken:
// {"pat_str", "special_tokens", "bpe_ranks"}, as the npm package tiktoken ships cl100k_base.json and
// o200k_base.json). Bytes that are not JSON are skipped (nlohmann's parser is not under test). A
// tokenizer from_tiktoken accepts is run as fuzz_tokenizer_util.h does, and its JSON form reads back
// to the same tokenizer.
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <string_view>

#include "fuzz_tokenizer_util.h"
#include "tokenizer/byte_bpe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  tformer::fuzz::expect_clean([&] {
    const tformer::ByteBpeTokenizer tok = tformer::ByteBpeTokenizer::from_tiktoken(j, "cl100k_base.json");
    tformer::fuzz::check_tokenizer(tok, std::string_view(reinterpret_cast<const char*>(data), size));
    if (tformer::tokenizer_from_json(tok.to_json())->to_json() != tok.to_json()) std::abort();
  });
  return 0;
}
