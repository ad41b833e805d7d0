// libFuzzer target: SentencePiece's tokenizer.model (tokenizer/sentencepiece.h,
// SentencePieceTokenizer::from_model_proto: the protobuf ModelProto, its pieces, trainer spec and
// normalizer spec with the precompiled charsmap's double-array trie). A model it accepts is run as
// fuzz_tokenizer_util.h does (normalizing included), and its JSON form reads back to the same
// tokenizer.
#include <cstdlib>
#include <string_view>

#include "fuzz_tokenizer_util.h"
#include "tokenizer/sentencepiece.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  tformer::fuzz::expect_clean([&] {
    const auto tok = tformer::SentencePieceTokenizer::from_model_proto(input, "tokenizer.model");
    tformer::fuzz::check_tokenizer(tok, input);
    if (tformer::tokenizer_from_json(tok.to_json())->to_json() != tok.to_json()) std::abort();
  });
  return 0;
}
